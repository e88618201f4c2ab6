package broker

// The cost of the broker's routing hot path.

import (
	"io"
	"strconv"
	"testing"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// benchRoute measures the broker's hot path — parse a frame in place,
// route it, queue it to n subscribed connections — with the connections'
// writers draining into the void.
func benchRoute(b *testing.B, n int, held bool) {
	br, secret := newTestBroker(b, Options{})
	b.Cleanup(func() { _ = br.Shutdown(b.Context()) })
	pub := join(b, br, secret, "pub")
	go func() { _, _ = io.Copy(io.Discard, pub.nc) }()
	for i := range n {
		s := join(b, br, secret, "sub"+strconv.Itoa(i))
		s.send(b, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte("orders.created")))
		m, err := s.r.ReadMessage()
		for err == nil && m.IsHeartbeat() {
			m, err = s.r.ReadMessage()
		}
		if err != nil || m.Value(wire.HeaderReplyTo) != "s" || m.Value(wire.HeaderRC) != "0" {
			b.Fatalf("subscribe: %v %q", err, m)
		}
		go func() { _, _ = io.Copy(io.Discard, s.nc) }()
	}
	if got := len(br.dir.subscribers("orders.created")); got != n {
		b.Fatalf("%d subscriptions registered, want %d", got, n)
	}
	loopStream(b, br, "pub", held)
}

// loopStream routes a 128-byte stream message on orders.created from node
// pub, b.N times, through the broker's dispatch: each woken at once, or,
// held, as a reader routes them (flushed once per heldBatch frames, a
// read's worth).
func loopStream(b *testing.B, br *Broker, pub string, inBatches bool) {
	c := br.dir.lookup(pub)
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	var v hotpath.View
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	const heldBatch = 16
	var h *held
	if inBatches {
		h = new(held)
	}
	i := 0
	for b.Loop() {
		br.dispatchHeld(c, frame, &v, h)
		if i++; i%heldBatch == 0 {
			h.flush()
		}
	}
	h.flush()
	b.ReportMetric(float64(br.Stats().Dropped)/float64(b.N), "drops/op")
}

func BenchmarkRouteStream1(b *testing.B)     { benchRoute(b, 1, false) }
func BenchmarkRouteStream4(b *testing.B)     { benchRoute(b, 4, false) }
func BenchmarkRouteStreamHeld1(b *testing.B) { benchRoute(b, 1, true) }
func BenchmarkRouteStreamHeld4(b *testing.B) { benchRoute(b, 4, true) }

// benchRouteAcross measures routing stream messages that cycle over n
// channels, each subscribed to by one connection (the side-by-side
// harness's workload 13 in one process): the cost of a message must not
// grow with n. Frames are held and flushed as a reader does.
func benchRouteAcross(b *testing.B, n int) {
	br, secret := newTestBroker(b, Options{MaxRegistrations: n})
	b.Cleanup(func() { _ = br.Shutdown(b.Context()) })
	pub := join(b, br, secret, "pub")
	go func() { _, _ = io.Copy(io.Discard, pub.nc) }()
	sub := join(b, br, secret, "sub")
	go func() { _, _ = io.Copy(io.Discard, sub.nc) }()
	sc := br.dir.lookup("sub")
	frames := make([][]byte, n)
	for i := range n {
		ch := "bench.scale." + strconv.Itoa(i)
		if r := br.register(sc, wire.CmdSubscribe, ch, ""); r != nil {
			b.Fatalf("%s: %s", ch, r.text)
		}
		frames[i] = wire.New(wire.TypeStream, ch).WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
			WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	}
	c := br.dir.lookup("pub")
	var v hotpath.View
	h := new(held)
	b.SetBytes(int64(len(frames[0])))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		br.dispatchHeld(c, frames[i%n], &v, h)
		if i++; i%16 == 0 {
			h.flush()
		}
	}
	h.flush()
	b.ReportMetric(float64(br.Stats().Dropped)/float64(b.N), "drops/op")
}

func BenchmarkRouteStreamAcross10(b *testing.B)    { benchRouteAcross(b, 10) }
func BenchmarkRouteStreamAcross10000(b *testing.B) { benchRouteAcross(b, 10000) }
