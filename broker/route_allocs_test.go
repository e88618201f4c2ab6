package broker

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"busbar/internal/hotpath"
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
