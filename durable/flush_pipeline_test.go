package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/durable"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/relay"
)

// pairedDevices returns two devices of one group "home".
func pairedDevices(t *testing.T) (a, b *durable.Device) {
	t.Helper()
	return pairWith(t, durable.Options{}, durable.Options{})
}

// everyOther is a relay clock that moves on half a second each time it is
// read (once per push it admits): with a push rate of one a second and a
// burst of one, it takes every other push of a run.
type everyOther struct {
	mu  sync.Mutex
	now time.Time
}

func (c *everyOther) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(500 * time.Millisecond)
	return c.now
}

// Flush over a broker relay pipelines a recipient's entries; when the
// relay refuses one of them temporarily (here the push rate, mid-pipeline),
// none of those behind it is stored before it: the recipient handles every
// message once, in the order sent.
func TestPipelinedFlushKeepsOrderAcrossRefusals(t *testing.T) {
	clock := &everyOther{now: time.Now()}
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir(),
		Relay: relay.Options{MaxPushRate: 1, PushBurst: 1, Now: clock.Now}})
	a, b := pairedDevices(t)
	ra := durable.NewClientRelay(testclient.Connect(t, e, "device-a"))
	rb := durable.NewClientRelay(testclient.Connect(t, e, "device-b"))
	if _, ok := ra.(durable.PipelinedRelay); !ok {
		t.Fatal("the client relay does not pipeline")
	}
	const n = 12
	var want []string
	for i := range n {
		want = append(want, fmt.Sprint("m", i))
		if _, err := a.Send(testclient.Ctx(t, 5*time.Second), "home", []byte(want[i])); err != nil {
			t.Fatal(err)
		}
	}
	retries := 0
	for round := 0; ; round++ {
		if round > 4*n {
			t.Fatal("the outbox never emptied")
		}
		res, err := a.Flush(testclient.Ctx(t, 5*time.Second), ra)
		if err != nil {
			t.Fatal(err)
		}
		retries += res.Retry
		if res.Pending == 0 {
			break
		}
		if err := a.RetryNow(); err != nil { // skip the backoff
			t.Fatal(err)
		}
	}
	if retries == 0 {
		t.Fatal("no push was refused: the test did not exercise a refusal")
	}
	got := make(chan string, n)
	if _, err := b.OnMessage(func(_ context.Context, m durable.Message) error { got <- string(m.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	stop := runDevice(t, b, rb)
	defer stop()
	expectBodies(t, got, want)
	t.Logf("%d messages, %d pushes refused and retried", n, retries)
}

// expectBodies takes len(want) bodies from got and checks they are want,
// in order.
func expectBodies(t *testing.T, got <-chan string, want []string) {
	t.Helper()
	for _, w := range want {
		select {
		case body := <-got:
			if body != w {
				t.Fatalf("got %q, want %q (all: %q)", body, w, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q never arrived", w)
		}
	}
}

// runDevice runs d on r until the returned stop is called, which checks
// that Run ended because it was stopped.
func runDevice(t *testing.T, d *durable.Device, r durable.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, r) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("Run ended with %v", err)
		}
	}
}
