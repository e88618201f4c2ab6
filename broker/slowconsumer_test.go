package broker_test

// A peer that stops reading cannot stall the broker, publishers or other
// nodes: what is sent to it is refused or dropped, and it is disconnected
// as a slow consumer.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestSlowReaderIsDisconnected: a node that stops reading cannot stall the
// broker or others: sends to it are BACKPRESSURED, then it is dropped as a
// slow consumer.
func TestSlowReaderIsDisconnected(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxQueueBytes: 256 << 10, MaxPayload: 64 << 10, WriteTimeout: time.Second})
	b := connect(t, e, "beta")
	c := connect(t, e, "gamma")
	if _, err := c.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "frozen", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s1").WithBody([]byte("flood")))
	r.Read(t) // subscribed; from now on it reads nothing
	// Flood it concurrently: kernel buffers and then the broker's bounded
	// queue fill, and the rest is refused.
	payload := make([]byte, 60<<10)
	const n = 64
	results := make(chan wire.Result, n)
	for range n {
		go func() {
			r, _ := b.Scope("s").Channel("flood").Send(ctxT(t, 3*time.Second), "frozen", payload)
			results <- r.Result
		}()
	}
	sawBackpressure := false
	for range n {
		sawBackpressure = sawBackpressure || <-results == wire.Backpressured
	}
	if !sawBackpressure {
		t.Fatal("never BACKPRESSURED")
	}
	// Others are served meanwhile.
	if _, err := b.Scope("s").Channel("echo").Request(ctxT(t, 5*time.Second), "gamma", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "slow consumer dropped", func() bool {
		return e.Broker.Stats().SlowConsumers == 1
	})
	testbroker.Eventually(t, 5*time.Second, "frozen gone from the directory", func() bool {
		for _, n := range e.Broker.Directory() {
			if n.Node == "frozen" {
				return false
			}
		}
		return true
	})
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
	testbroker.Await(t, 30*time.Second, "the healthy subscriber to receive nine in ten", func() error {
		if g := got.Load(); g < n*9/10 {
			return fmt.Errorf("healthy subscriber got %d of %d; broker dropped %d, the node %d", g, n, e.Broker.Stats().Dropped, healthy.Dropped())
		}
		return nil
	})
	if took > 20*time.Second {
		t.Fatalf("publishing took %v: the stuck subscriber held the publisher back", took)
	}
	if e.Broker.Stats().Dropped == 0 {
		t.Fatal("nothing dropped for the stuck subscriber")
	}
}
