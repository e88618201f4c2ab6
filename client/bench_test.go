package client_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
)

// BenchmarkRequestReply measures one synchronous request/reply round trip
// through a broker over a Unix socket (128-byte payload).
func BenchmarkRequestReply(b *testing.B) {
	ch := echoChannel(b)
	payload := make([]byte, 128)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := ch.Request(ctx, "server", payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestReplyConcurrent measures request/reply round trips from
// 16 goroutines sharing one requesting connection (the harness's workload
// 4), through a broker over a Unix socket (128-byte payload).
func BenchmarkRequestReplyConcurrent(b *testing.B) {
	ch := echoChannel(b)
	payload := make([]byte, 128)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := ch.Request(context.Background(), "server", payload); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// echoChannel connects a responder echoing requests on channel echo and a
// requester, through a broker over a Unix socket, and returns the
// requester's channel; requests go to node "server".
func echoChannel(b *testing.B) *client.Channel {
	_, cl := echoPair(b, testbroker.Start(b, "unix", testOpts()))
	return cl.Scope("s").Channel("echo")
}

// echoPair connects node "server", whose scope "s" echoes requests on
// channel echo, and node "client", through e.
func echoPair(tb testing.TB, e *testbroker.Env) (srv, cl *client.Client) {
	tb.Helper()
	srv = connect(tb, e, "server")
	cl = connect(tb, e, "client")
	if _, err := srv.Scope("s").Channel("echo").Handle(ctxT(tb, 5*time.Second), echo); err != nil {
		tb.Fatal(err)
	}
	return srv, cl
}

// BenchmarkSendReceipt measures an event sent to one node and its
// receipt (the node accepted it into its dispatch queue).
func BenchmarkSendReceipt(b *testing.B) {
	e := testbroker.Start(b, "unix", testOpts())
	srv := connect(b, e, "server", func(o *client.Options) { o.DispatchQueue = 1 << 16 })
	cl := connect(b, e, "client")
	if _, err := srv.Scope("s").Channel("ev").Subscribe(context.Background(), func(context.Context, *client.Message) {}); err != nil {
		b.Fatal(err)
	}
	ch := cl.Scope("s").Channel("ev")
	payload := make([]byte, 128)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := ch.Send(ctx, "server", payload); r.Result != "ACCEPTED" {
			b.Fatal(r)
		}
	}
}

// BenchmarkEmitDeliver measures stream messages from one publisher to one
// subscriber through the broker over a Unix socket (128 B). Streams are best
// effort: what a full queue dropped is reported as drops/op.
func BenchmarkEmitDeliver(b *testing.B) {
	e := testbroker.Start(b, "unix", testOpts())
	sub := connect(b, e, "sub", func(o *client.Options) { o.DispatchQueue = 1 << 16 })
	pub := connect(b, e, "pub")
	var n atomic.Int64
	if _, err := sub.Scope("s").Channel("flow").Subscribe(context.Background(), func(context.Context, *client.Message) {
		n.Add(1)
	}); err != nil {
		b.Fatal(err)
	}
	ch := pub.Scope("s").Channel("flow")
	payload := make([]byte, 128)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for range b.N {
		if err := ch.Emit(ctx, payload); err != nil {
			b.Fatal(err)
		}
	}
	settled := func() int64 { return n.Load() + e.Broker.Stats().Dropped + sub.Dropped() }
	testbroker.Await(b, 30*time.Second, "every message delivered or dropped", func() error {
		if s := settled(); s < int64(b.N) {
			return fmt.Errorf("%d of %d messages unaccounted for", int64(b.N)-s, b.N)
		}
		return nil
	})
	b.StopTimer()
	b.ReportMetric(float64(e.Broker.Stats().Dropped)/float64(b.N), "broker-drops/op")
	b.ReportMetric(float64(sub.Dropped())/float64(b.N), "node-drops/op")
}
