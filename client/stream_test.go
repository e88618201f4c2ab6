package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
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
		if _, err := x.c.Scope("s").Channel("metrics").Subscribe(ctxT(t, 5*time.Second), x.in.handler); err != nil {
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
	testbroker.Eventually(t, 10*time.Second, "all delivered", func() bool { return a.len() == n && b.len() == n })
	for i := range n {
		got := a.get(i).Payload()
		if int(got[0])<<8|int(got[1]) != i {
			t.Fatalf("message %d arrived as %v: order not kept", i, got)
		}
		if a.get(i).From() != "producer.bus" || a.get(i).ID() == "" {
			t.Fatalf("message %+v", a.get(i))
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
	if a.len() != n || b.len() != n {
		t.Fatal("extra deliveries")
	}
}

// TestStreamStuckSubscriberDoesNotStallPublisher: a subscriber that stops
// reading loses stream messages once its queue is full and its writer has
// made no progress, while the publisher is not held back by it (a stall per
// message would take 20000 × 2 ms) and a healthy subscriber keeps
// receiving. (Streams are best effort: under the race detector even the
// healthy one may fall behind for longer than the stall allows.)
func TestStreamStuckSubscriberDoesNotStallPublisher(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxQueueBytes: 1 << 20, MaxPayload: 4096})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "stuck", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte("flow")))
	r.Read(t) // subscribed; reads nothing more
	var got atomic.Int64
	healthy := connect(t, e, "healthy", func(o *client.Options) { o.DispatchQueue = 1 << 15 })
	if _, err := healthy.Scope("s").Channel("flow").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	p := connect(t, e, "producer")
	ch := p.Scope("s").Channel("flow")
	payload := make([]byte, 1024)
	const n = 20000
	start := time.Now()
	for range n {
		if err := ch.Emit(ctxT(t, 30*time.Second), payload); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	// Wait until the healthy subscriber has everything or stops receiving.
	for last := int64(-1); got.Load() < n && got.Load() != last; {
		last = got.Load()
		time.Sleep(500 * time.Millisecond)
	}
	if got.Load() < n*9/10 {
		t.Fatalf("healthy subscriber got %d of %d; broker dropped %d, the node %d", got.Load(), n, e.Broker.Stats().Dropped, healthy.Dropped())
	}
	if took > 20*time.Second {
		t.Fatalf("publishing took %v: the stuck subscriber held the publisher back", took)
	}
	if e.Broker.Stats().Dropped == 0 {
		t.Fatal("nothing dropped for the stuck subscriber")
	}
}
