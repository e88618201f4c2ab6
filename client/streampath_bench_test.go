package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// BenchmarkDeliverStream128 measures the subscriber's stream path without
// a socket: a parsed 128-byte stream frame (as the broker forwards it,
// with from and ttl) handed to the reader's deliverStream, batched 16 to a
// read, handed to the default executor and run by one subscriber — the
// copy, the subscriber lookup, the deadline, the hand-off and the worker.
// At most 528 messages are in flight, fewer than any queue here, so nothing is dropped. The
// dispatch queue is the default's size and the harness's (its subscribers
// take 65,536).
func BenchmarkDeliverStream128(b *testing.B) {
	for _, queue := range []int{DefaultDispatchQueue, 1 << 16} {
		b.Run(fmt.Sprintf("queue=%d", queue), func(b *testing.B) { benchmarkDeliverStream(b, queue) })
	}
}

func benchmarkDeliverStream(b *testing.B, queue int) {
	const (
		perRead  = 16  // frames one read brings in
		inFlight = 256 // the reader waits for the worker every inFlight messages, keeping two such spans at most
	)
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, newID()).
		WithHeader(wire.HeaderFrom, "shop.bus").WithHeader(wire.HeaderTTL, "0000030000").
		WithBody(make([]byte, 128)).ToBytes()
	var v hotpath.View
	if err := hotpath.ParseView(frame, &v); err != nil {
		b.Fatal(err)
	}
	var (
		n        atomic.Int64
		progress = make(chan struct{}, b.N/inFlight+1)
	)
	sub := &Subscription{h: func(context.Context, *Message) {
		if n.Add(1)%inFlight == 0 {
			progress <- struct{}{}
		}
	}}
	c := &Client{ctx: context.Background(), log: slog.Default(), subs: map[string][]*Subscription{"orders.created": {sub}}}
	c.opts.DispatchQueue = queue
	c.pool = newPool(1, c.opts.DispatchQueue)
	c.exec = c.pool
	defer c.pool.close()
	cn := &conn{streams: make([]streamItem, 0, maxStreamBatch)}
	var now hotpath.Instant
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c.deliverStream(cn, &v, &now)
		if i%perRead == perRead-1 {
			c.flushStreams(cn)
			now = 0
		}
		if i%inFlight == inFlight-1 && i >= 2*inFlight {
			<-progress
		}
	}
	c.flushStreams(cn)
	c.pool.close()
	b.StopTimer()
	if got := n.Load(); got != int64(b.N) || c.drops.streams.Load() != 0 {
		b.Fatalf("%d of %d delivered, %d dropped", got, b.N, c.drops.streams.Load())
	}
}
