package broker

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"busbar/internal/hotpath"
	"busbar/internal/testnats"
	"busbar/wire"
)

// TestRoutingAStreamMessageAllocatesNothing pins the hot path's promise
// on both of its entries: a stream message a node sends, and one a link
// brings from another broker, is parsed in place and encoded straight
// into the subscriber's queue, with no allocation per message (the
// figures are in BenchmarkRouteStream*).
func TestRoutingAStreamMessageAllocatesNothing(t *testing.T) {
	br, secret := newTestBroker(t, Options{})
	t.Cleanup(func() { _ = br.Shutdown(t.Context()) })
	pub := join(t, br, secret, "pub")
	go func() { _, _ = io.Copy(io.Discard, pub.nc) }()
	sub := join(t, br, secret, "sub")
	var got atomic.Int64 // bytes the subscriber read
	go func() { _, _ = io.Copy(countingDiscard{&got}, sub.nc) }()
	if r := br.register(br.dir.lookup("sub"), wire.CmdSubscribe, "orders.created", ""); r != nil {
		t.Fatal(r.text)
	}
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	// As another broker's link brings it: from that broker's node.
	linked := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderFrom, "far.bus").WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	l := &link{endpoint: endpoint{b: br, node: "b2", addr: "b2.bus"}}
	c := br.dir.lookup("pub")
	var v hotpath.View
	h := new(held)
	// 2,002 messages of about 200 bytes stay far below the subscriber's
	// pace mark (DefaultMaxQueueBytes): no stall, on however busy a
	// machine, so nothing makes a shared frame.
	for _, tc := range []struct {
		name  string
		route func()
	}{
		{"from a node", func() { br.dispatchHeld(c, frame, &v, h) }},
		{"from a link", func() {
			if err := hotpath.ParseView(linked, &v); err != nil {
				t.Fatal(err)
			}
			br.dispatchLink(l, &v, h)
		}},
	} {
		i := 0
		if n := testing.AllocsPerRun(1000, func() {
			tc.route()
			if i++; i%16 == 0 {
				h.flush()
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per message", tc.name, n)
		}
		h.flush()
	}
	// Both entries delivered (not, say, dropped every message unallocated).
	want := int64(2000 * len(frame)) // at least: the link's frames are longer
	pollUntil(t, time.Minute, "the subscriber reads every message", func() bool { return got.Load() >= want })
}

type countingDiscard struct{ n *atomic.Int64 }

func (c countingDiscard) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// TestRoutingAStreamMessageToAnotherBrokerAllocatesNothing pins the
// sending broker's side of the promise: a stream message for a subscriber
// on another broker is put into the link's queue as one shared frame from
// the pool, which the link's writer returns once published, with no
// allocation per message. The brokers run on a real NATS cluster in this
// process, and what NATS and the receiving broker allocate per link
// message would count too: so the routing is measured on its own, the
// frames held (as within one read of the sender's socket) and the link's
// writer not woken until the count is taken. Rounds of as many messages
// routed, sent and delivered first leave the pool and the link's queue as
// a running broker's are.
func TestRoutingAStreamMessageToAnotherBrokerAllocatesNothing(t *testing.T) {
	nc := testnats.Start(t, 2)
	var brokers []*Broker
	var secrets []string
	for i := range 2 {
		// Heartbeats a minute apart: nothing but the test's traffic
		// allocates while it counts (a broker's heartbeat is JSON).
		b, secret := newTestBroker(t, Options{Name: fmt.Sprintf("b%d", i+1), HeartbeatInterval: time.Minute, LeaseTimeout: 3 * time.Minute,
			Cluster: ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: time.Minute, Lease: 3 * time.Minute}})
		t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
		brokers, secrets = append(brokers, b), append(secrets, secret)
	}
	b1, b2 := brokers[0], brokers[1]
	pub := join(t, b1, secrets[0], "pub")
	go func() { _, _ = io.Copy(io.Discard, pub.nc) }()
	sub := join(t, b2, secrets[1], "sub")
	if r := b2.register(b2.dir.lookup("sub"), wire.CmdSubscribe, "orders.created", ""); r != nil {
		t.Fatal(r.text)
	}
	b2.bus.changed()     // as the subscribe command does: b2 shares it at once
	var got atomic.Int64 // bytes the subscriber read
	go func() { _, _ = io.Copy(countingDiscard{&got}, sub.nc) }()
	pollUntil(t, time.Minute, "b1 knows b2's subscriber", func() bool {
		return slices.Contains(b1.bus.subscribedBrokers("orders.created"), "b2")
	})
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	c := b1.dir.lookup("pub")
	var v hotpath.View
	h := new(held)
	// One message first: the link opens, and the size of a frame as it
	// reaches the subscriber (from and ttl stamped) is known. b2 writes a
	// batch to the pipe in one Write, which net.Pipe hands to io.Copy's
	// one Read: the first count is the whole frame, not a part of it.
	b1.dispatchHeld(c, frame, &v, h)
	h.flush()
	pollUntil(t, time.Minute, "the first message crosses", func() bool { return got.Load() > 0 })
	size := got.Load()
	const runs = 400
	sent := int64(1)
	route := func(n int) { // n messages, sent at once, waited for at the subscriber
		for range n {
			b1.dispatchHeld(c, frame, &v, h)
		}
		h.flush()
		sent += int64(n)
		pollUntil(t, time.Minute, "the subscriber on b2 reads them", func() bool { return got.Load() >= sent*size })
	}
	route(runs + 50)
	route(runs + 50)
	if n := testing.AllocsPerRun(runs, func() { b1.dispatchHeld(c, frame, &v, h) }); n != 0 {
		t.Errorf("%v allocations per message routed to another broker", n)
	}
	h.flush()
	// Every message crossed, whole (none was, say, dropped unallocated).
	want := (sent + runs + 1) * size
	pollUntil(t, time.Minute, "the subscriber on b2 reads every message", func() bool { return got.Load() >= want })
	if n := got.Load(); n != want {
		t.Errorf("the subscriber read %d bytes, want %d", n, want)
	}
	for _, b := range brokers {
		for r := range b.stats.drops {
			if n := b.stats.drops[r].Load(); n != 0 {
				t.Errorf("%s dropped %d: %v", b.opts.Name, n, DropReason(r))
			}
		}
	}
}
