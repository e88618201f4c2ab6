package client_test

// Stream messages (Emit): fire and forget, in order from one producer,
// dropped and counted when refused or when a queue is full. Drops for a
// subscriber that stopped reading are checked in package broker.

import (
	"context"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
)

// TestEmit: a stream message reaches every subscribed node permitted to
// receive it, in order from one producer (one worker), with no answer;
// refusals and full queues drop it, counted.
func TestEmit(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts(),
		auth.Principal{Name: "mute", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{Subscribe: []auth.Pattern{">"}}},
	)
	p := connect(t, e, "producer")
	var a, b inbox
	ca := connect(t, e, "a", func(o *client.Options) { o.Workers = 1 })
	cb := connect(t, e, "b", func(o *client.Options) { o.Workers = 1 })
	for _, x := range []struct {
		c  *client.Client
		in *inbox
	}{{ca, &a}, {cb, &b}} {
		if _, err := x.c.Scope("s").Channel("metrics").Subscribe(ctxT(t, 5*time.Second), x.in.Handler); err != nil {
			t.Fatal(err)
		}
	}
	connect(t, e, "bystander") // not subscribed: gets nothing
	ch := p.Scope("s").Channel("metrics")
	const n = 1000
	for i := range n {
		if err := ch.Emit(ctxT(t, 5*time.Second), []byte{byte(i >> 8), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	testbroker.Eventually(t, 10*time.Second, "all delivered", func() bool { return a.Len() == n && b.Len() == n })
	for i := range n {
		got := a.Get(i).Payload()
		if int(got[0])<<8|int(got[1]) != i {
			t.Fatalf("message %d arrived as %v: order not kept", i, got)
		}
		if a.Get(i).From() != "producer.bus" || a.Get(i).ID() == "" {
			t.Fatalf("message %+v", a.Get(i))
		}
	}
	// A node that may not publish: dropped at the broker, counted.
	m := connect(t, e, "mute-node", func(o *client.Options) { o.Credential.Principal = "mute" })
	if err := m.Scope("s").Channel("metrics").Emit(ctxT(t, 5*time.Second), []byte("x")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "refusal counted", func() bool { return e.Broker.Stats().Dropped == 1 })
	// A done context fails Emit even when the queue has room.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ch.Emit(done, nil); err != context.Canceled {
		t.Fatalf("Emit with a done context: %v", err)
	}
	// A full dispatch queue drops on the receiving node, counted there.
	release := make(chan struct{})
	slow := connect(t, e, "slow", func(o *client.Options) { o.Workers = 1; o.DispatchQueue = 1 })
	if _, err := slow.Scope("s").Channel("burst").Subscribe(ctxT(t, 5*time.Second), func(ctx context.Context, _ *client.Message) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := p.Scope("s").Channel("burst").Emit(ctxT(t, 5*time.Second), nil); err != nil {
			t.Fatal(err)
		}
	}
	testbroker.Eventually(t, 5*time.Second, "drops counted on the node", func() bool { return slow.Dropped() >= 8 })
	close(release)
	if a.Len() != n || b.Len() != n {
		t.Fatal("extra deliveries")
	}
}
