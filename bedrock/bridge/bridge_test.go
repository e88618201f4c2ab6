package bridge

// The bridge between a busbar broker and a bedrock world: events both
// ways, state exported to the medium, and the bound on busbar-bound work.
// This file also holds the test world (a broker, a medium on a real clock,
// a bridge) and the leak check. call_test.go checks calls to add-ons,
// lifecycle_test.go what the bridge leaves on the client.

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"busbar/bedrock"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/leakcheck"
	"busbar/internal/testbroker"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// world is a broker, an in-memory bedrock world on a real clock, and a
// bridge between them.
type world struct {
	b      *broker.Broker
	clock  *bedrock.RealClock
	w      *bedrock.World
	bridge *Bridge
}

func connect(t *testing.T, b *broker.Broker, node string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{Node: node, Dial: func(context.Context) (net.Conn, error) { return b.DialInProcess() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newWorld(t *testing.T, opts Options, before func(*broker.Broker)) *world {
	t.Helper()
	b, err := broker.New(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	if before != nil {
		before(b)
	}
	clock := bedrock.NewRealClock()
	t.Cleanup(clock.Close)
	w := bedrock.NewWorld(clock, bedrock.WorldOptions{})
	t.Cleanup(w.Close)
	bus, _ := bedrock.New(bedrock.Options{SelfID: ServiceName, Medium: w, Clock: clock})
	opts.Client, opts.Bus = connect(t, b, "bridge"), bus
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	br, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	return &world{b: b, clock: clock, w: w, bridge: br}
}

func (w *world) addon(t *testing.T, id string) *bedrock.Bus {
	t.Helper()
	bus, _ := bedrock.New(bedrock.Options{SelfID: id, Medium: w.w, Clock: w.clock})
	bus.Start()
	t.Cleanup(bus.Stop)
	return bus
}

func TestEventsBothWays(t *testing.T) {
	w := newWorld(t, Options{ExportEvents: []string{"alerts"}}, nil)
	lamp := w.addon(t, "lamp")
	var mu sync.Mutex
	var heard []string
	lamp.On("alerts", func(e *bedrock.Envelope) {
		mu.Lock()
		heard = append(heard, string(e.Data))
		mu.Unlock()
	})
	c := connect(t, w.b, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan string, 4)
	if _, err := c.Scope("s").Channel(EventPrefix+"motion").Subscribe(ctx, func(_ context.Context, m *client.Message) {
		got <- string(m.Payload())
	}); err != nil {
		t.Fatal(err)
	}
	lamp.Send(bedrock.SendOptions{Type: "motion", Data: json.RawMessage(`{"x":1}`)})
	select {
	case p := <-got:
		if p != `{"x":1}` {
			t.Fatalf("imported %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("event not imported")
	}
	if err := c.Scope("s").Channel("alerts").Emit(ctx, []byte("fire")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "the exported event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard) == 1 && heard[0] == `"fire"`
	})
}

// exportingWorld is a world whose bridge exports busbar namespace
// "settings", where node owner has set volume to 7.
func exportingWorld(t *testing.T) (*world, *client.Client) {
	t.Helper()
	var owner *client.Client
	w := newWorld(t, Options{ExportState: []string{"settings"}}, func(b *broker.Broker) {
		owner = connect(t, b, "owner")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := owner.State("settings").Set(ctx, "volume", 7); err != nil {
			t.Fatal(err)
		}
	})
	return w, owner
}

func TestStateExportedToTheMedium(t *testing.T) {
	w, owner := exportingWorld(t)
	st := bedrock.NewState(w.addon(t, "lamp"), bedrock.StateOptions{})
	st.Follow("settings")
	testbroker.Eventually(t, 10*time.Second, "the exported namespace", func() bool {
		e, ok := st.Get("settings", "volume")
		return ok && string(e.Value) == "7"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := owner.State("settings").Set(ctx, "volume", 11); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "the change", func() bool {
		e, ok := st.Get("settings", "volume")
		return ok && string(e.Value) == "11"
	})
}

// TestPendingJobsEdge: busbar-bound work queues up to MaxPendingJobs while
// the broker is slow; past it, work is dropped.
func TestPendingJobsEdge(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	br := w.bridge
	release := make(chan struct{})
	started := make(chan struct{})
	br.enqueue(func() { close(started); <-release }) // holds the worker
	<-started
	for range MaxPendingJobs {
		br.enqueue(func() {})
	}
	br.mu.Lock()
	atLimit := len(br.jobs)
	br.mu.Unlock()
	br.enqueue(func() { t.Error("a job past MaxPendingJobs ran") })
	br.mu.Lock()
	after := len(br.jobs)
	br.mu.Unlock()
	close(release)
	if atLimit != MaxPendingJobs || after != MaxPendingJobs {
		t.Fatalf("queued %d at the limit, %d after one more", atLimit, after)
	}
	testbroker.Eventually(t, 5*time.Second, "the queue to drain", func() bool {
		br.mu.Lock()
		defer br.mu.Unlock()
		return len(br.jobs) == 0
	})
}
