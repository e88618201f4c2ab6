package broker

import (
	"io"
	"strconv"
	"testing"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// benchRoute measures the broker's hot path — parse a frame in place,
// route it, queue it to n subscribed connections — with the connections'
// writers draining into the void.
func benchRoute(b *testing.B, n int) {
	br, secret := newTestBroker(b, Options{})
	b.Cleanup(func() { _ = br.Shutdown(b.Context()) })
	pub := join(b, br, secret, "pub")
	go func() { _, _ = io.Copy(io.Discard, pub.nc) }()
	for i := range n {
		s := join(b, br, secret, "sub"+strconv.Itoa(i))
		go func() { _, _ = io.Copy(io.Discard, s.nc) }()
		s.send(b, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte("orders.created")))
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(br.dir.subscribers("orders.created")) < n {
		if time.Now().After(deadline) {
			b.Fatal("subscriptions not registered")
		}
		time.Sleep(time.Millisecond)
	}
	c := br.dir.lookup("pub")
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	var v hotpath.View
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		br.dispatch(c, frame, &v)
	}
	b.ReportMetric(float64(br.Stats().Dropped)/float64(b.N), "drops/op")
}

func BenchmarkRouteStream1(b *testing.B) { benchRoute(b, 1) }
func BenchmarkRouteStream4(b *testing.B) { benchRoute(b, 4) }
