package client

// Message ids (their form, uniqueness and cost) and message payloads.

import (
	"bytes"
	"fmt"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"busbar/internal/hotpath"
	"busbar/wire"
)

func TestMessageIDs(t *testing.T) {
	format := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10000 {
				id := newID()
				mu.Lock()
				dup := seen[id]
				seen[id] = true
				mu.Unlock()
				if dup || !format.MatchString(id) {
					t.Errorf("id %q (duplicate %v)", id, dup)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 40000 {
		t.Fatalf("%d distinct ids", len(seen))
	}
}

func TestIDCounterIsItsHexDigits(t *testing.T) {
	for _, n := range []uint64{0, 1, 9, 10, 15, 16, 0xffffffff, 1 << 32, 0x0123456789abcdef, 0xfedcba9876543210, 0xa0b0c0d0e0f09080, ^uint64(0)} {
		h := fmt.Sprintf("%016x", n)
		if got, want := string(appendCounter([]byte("x"), n)), "x"+string(idHead[:])+h[:4]+"-"+h[4:]; got != want {
			t.Errorf("%#x: %q, want %q", n, got, want)
		}
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	var buf [36]byte
	for b.Loop() {
		appendID(buf[:0])
	}
}

func TestMessageDataIsThePayload(t *testing.T) {
	m := newMessage(wire.New(wire.TypeEvent, "c").WithBody([]byte("body")), Event, 0)
	o := m.copyForReceiver()
	d, p := m.Payload(), o.Payload()
	if string(d) != "body" || string(p) != "body" || &d[0] == &p[0] || &m.Payload()[0] != &d[0] {
		t.Fatal("Payload is the receiver's own payload, not copied per call; another receiver has its own")
	}
	p[0] = 'X'
	if string(m.Payload()) != "body" {
		t.Fatal("modifying another receiver's payload changed this one")
	}
}

func TestMessageFromViewIsOneAllocation(t *testing.T) {
	for _, size := range []int{0, 128, 400, 4096} {
		frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, newID()).
			WithHeader(wire.HeaderFrom, "shop.bus").WithBody(make([]byte, size)).ToBytes()
		var v hotpath.View
		if err := hotpath.ParseView(frame, &v); err != nil {
			t.Fatal(err)
		}
		want := 1.0
		if size > 400 {
			want = 2 // too large to share the Message's allocation
		}
		var m *Message
		if a := testing.AllocsPerRun(100, func() { m = messageFromView(&v, Event, 0) }); a != want {
			t.Errorf("%d-byte payload: %.0f allocations, want %.0f", size, a, want)
		}
		if m.Channel() != "orders.created" || m.From() != "shop.bus" || len(m.Payload()) != size || cap(m.Payload()) != size {
			t.Errorf("%d-byte payload: %q %q %d/%d", size, m.Channel(), m.From(), len(m.Payload()), cap(m.Payload()))
		}
		frame[len(frame)-1] ^= 1 // the read buffer is reused: the Message must not change
		if size > 0 && m.Payload()[size-1] != 0 {
			t.Errorf("%d-byte payload aliases the frame", size)
		}
	}
}

// A received message is the garbage collector's main cost on a busy
// subscriber: it must take the smallest of allocMessage's sizes that holds
// it, and nothing past it.
func TestMessageTakesTheSmallestSizeThatHoldsIt(t *testing.T) {
	header := int(unsafe.Sizeof(Message{}))
	if header > 56 {
		t.Errorf("Message is %d bytes, want at most 56", header)
	}
	sizes := []int{128, 192, 256, 320, 416, 512, 640} // the last holds 8 bytes less: the allocator's header
	for _, size := range []int{0, 40, 128, 200, 300, 360, 400, 460, 515} {
		frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, newID()).
			WithHeader(wire.HeaderFrom, "shop.bus").WithBody(make([]byte, size)).ToBytes()
		var v hotpath.View
		if err := hotpath.ParseView(frame, &v); err != nil {
			t.Fatal(err)
		}
		need := header + len(messageFromView(&v, Event, 0).data)
		want := 0
		for _, s := range sizes {
			if s >= need && (s <= 512 || s-mallocHeader >= need) {
				want = s
				break
			}
		}
		const n = 1000
		keep := make([]*Message, n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i] = messageFromView(&v, Event, 0)
		}
		runtime.ReadMemStats(&after)
		// The allocator counts a span's free slots as allocated when it
		// hands the span out and takes back the unused ones later, so the
		// total can be ahead by up to one span (8 KiB for these sizes):
		// a few bytes a message, well under the step between sizes.
		const slack = 8 << 10 / n
		if got := int(after.TotalAlloc-before.TotalAlloc) / n; got < want || got > want+slack {
			t.Errorf("%d-byte payload (%d bytes with its fields and header): %d bytes allocated, want %d", size, need, got, want)
		}
		runtime.KeepAlive(keep)
	}
}

func BenchmarkMessageFromView128(b *testing.B) { benchmarkMessageFromView(b, 128) }

// 16 KiB: past the sizes that share the Message's allocation (buildLarge).
func BenchmarkMessageFromView16K(b *testing.B) { benchmarkMessageFromView(b, 16<<10) }

func benchmarkMessageFromView(b *testing.B, size int) {
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, newID()).
		WithHeader(wire.HeaderFrom, "shop.bus").WithBody(make([]byte, size)).ToBytes()
	var v hotpath.View
	if err := hotpath.ParseView(frame, &v); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		messageFromView(&v, Event, 0)
	}
}

// Past the sizes that share the Message's allocation, the data is one
// allocation of its own, holding the fields and payload exactly, and a
// copy for another receiver is a buffer of its own with the same bytes.
func TestLargeMessageHoldsItsFieldsAndPayload(t *testing.T) {
	for _, size := range []int{maxInlineData, maxInlineData + 1, 16 << 10, 1 << 20} {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i*7 + 1)
		}
		id := newID()
		frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, id).
			WithHeader(wire.HeaderFrom, "shop.bus").WithBody(payload).ToBytes()
		var v hotpath.View
		if err := hotpath.ParseView(frame, &v); err != nil {
			t.Fatal(err)
		}
		for _, m := range []*Message{messageFromView(&v, Event, 0), messageFromView(&v, Event, 0).copyForReceiver()} {
			if m.ID() != id || m.Channel() != "orders.created" || m.From() != "shop.bus" || m.To() != "" {
				t.Fatalf("%d bytes: fields %q %q %q %q", size, m.ID(), m.Channel(), m.From(), m.To())
			}
			if !bytes.Equal(m.Payload(), payload) {
				t.Fatalf("%d bytes: payload differs", size)
			}
		}
		a, b := messageFromView(&v, Event, 0), messageFromView(&v, Event, 0)
		a.Payload()[0]++
		if b.Payload()[0] == a.Payload()[0] || a.copyForReceiver().Payload()[0] != a.Payload()[0] {
			t.Fatalf("%d bytes: messages share a payload", size)
		}
	}
}
