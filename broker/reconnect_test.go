package broker_test

// What happens to a node's calls, records and queued messages when its
// connection ends or a newer connection of the same node replaces it: the
// old connection is isolated at once, nothing is replayed to the new one.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestReconnectIsolatesOldConnection: the same node name connecting again
// replaces the old connection (epoch+1); calls bound to the old one fail
// and its late answers never reach the new one.
func TestReconnectIsolatesOldConnection(t *testing.T) {
	eachTopology(t, testOpts(), testReconnectIsolatesOldConnection)
}

func testReconnectIsolatesOldConnection(t *testing.T, p placement) {
	b := connect(t, p.at(0), "beta")
	e := p.at(1)
	old := connect(t, e, "alpha")
	entered := make(chan struct{})
	if _, err := old.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		return []byte("late"), nil
	}); err != nil {
		t.Fatal(err)
	}
	p.sees(t, "alpha")
	res := make(chan error, 1)
	go func() {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", nil)
		res <- err
	}()
	<-entered
	fresh := connect(t, e, "alpha")
	if fresh.Epoch() != old.Epoch()+1 {
		t.Fatalf("epochs %d then %d", old.Epoch(), fresh.Epoch())
	}
	if err := <-res; !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("call bound to the old connection: %v", err)
	}
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("old connection not closed")
	}
	if !strings.Contains(old.Err().Error(), string(wire.ResultReplaced)) {
		t.Fatalf("old connection ended with %v", old.Err())
	}
	// The new connection has none of the old one's handlers.
	if _, err := b.Scope("s").Channel("work").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrNoHandler) {
		t.Fatalf("request to the new connection: %v", err)
	}
}

// TestDisconnectWithoutReplay: a pending request fails when its handler's
// node goes away, and nothing is replayed when it comes back.
func TestDisconnectWithoutReplay(t *testing.T) {
	eachTopology(t, testOpts(), testDisconnectWithoutReplay)
}

func testDisconnectWithoutReplay(t *testing.T, p placement) {
	b := connect(t, p.at(0), "beta")
	e := p.at(1)
	a, err := dialClient(e, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	if _, err := a.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	p.sees(t, "alpha")
	res := make(chan error, 1)
	go func() {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", nil)
		res <- err
	}()
	<-entered
	a.Close()
	if err := <-res; !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("pending request: %v", err)
	}
	if r, _ := b.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", nil); r.Result != wire.NotConnected {
		t.Fatalf("send while away: %+v", r)
	}
	var in inbox
	a2 := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1 }) // callbacks in arrival order
	if _, err := a2.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	p.sees(t, "alpha:ev")
	// A marker sent now is queued behind anything the broker replayed.
	if r, _ := b.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", []byte("marker")); r.Result != wire.Accepted {
		t.Fatalf("send after the reconnection: %+v", r)
	}
	testbroker.Eventually(t, 5*time.Second, "the marker delivered", func() bool { return in.Len() >= 1 })
	if n, first := in.Len(), string(in.Get(0).Payload()); n != 1 || first != "marker" {
		t.Fatalf("an event was replayed across connections: %d delivered, the first %q", n, first)
	}
}

// TestReplacedConnectionLosesItsServices: alpha's old connection stops
// reading (its socket is full), alpha reconnects without hosting "svc" any
// more and beta announces "svc": the bare name "svc" reaches beta, and
// Whois no longer lists the replaced connection (docs/discovery.md).
// (The old record used to stay until the old writer gave up, WriteTimeout
// later, so "svc" was AMBIGUOUS meanwhile.)
func TestReplacedConnectionLosesItsServices(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{WriteTimeout: 5 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	owner := connect(t, e, "owner")
	old, pc := connectPausable(t, e, "alpha")
	if _, err := old.Announce(ctx, wire.Announcement{Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	w, err := old.State("fill").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pc.Pause()
	value := strings.Repeat("x", 60_000)
	for i := range 40 { // far more than the socket buffers hold
		if _, err := owner.State("fill").Set(ctx, fmt.Sprint("k", i), value); err != nil {
			t.Fatal(err)
		}
	}
	oldEpoch := old.Epoch()
	connect(t, e, "alpha") // replaces the old connection
	beta := connect(t, e, "beta")
	if _, err := beta.Scope("s").Channel("svc.ping").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
		return []byte("beta"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := beta.Announce(ctx, wire.Announcement{Service: "svc", Channels: []string{"svc.ping"}}); err != nil {
		t.Fatal(err)
	}
	// The old connection may take a moment to leave; not its WriteTimeout.
	testbroker.Await(t, 1500*time.Millisecond, "the replaced connection's services to go", func() error {
		m, err := owner.Scope("c").Channel("svc.ping").Request(ctx, "svc", nil)
		list, _ := owner.Whois(ctx, "svc")
		var stale []string
		for _, in := range list {
			if in.Provenance.Node == "alpha" && in.Provenance.Epoch == oldEpoch {
				stale = append(stale, in.Address)
			}
		}
		if err == nil && string(m.Payload()) == "beta" && len(stale) == 0 {
			return nil
		}
		return fmt.Errorf("request to svc: %v; records of the replaced connection: %v", err, stale)
	})
}
