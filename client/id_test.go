package client

// Message ids (their form, uniqueness and cost) and message payloads.

import (
	"regexp"
	"sync"
	"testing"
	"time"

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

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	var buf [36]byte
	for b.Loop() {
		appendID(buf[:0])
	}
}

func TestMessageDataIsThePayload(t *testing.T) {
	m := newMessage(wire.New(wire.TypeEvent, "c").WithBody([]byte("body")), Event, time.Time{})
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
