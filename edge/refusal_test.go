package edge

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Within one interval a reason writes RefusalBurst lines and no more, one
// per source address; the first line of the next interval says how many
// were not written.
func TestRefusalLogBoundsEachReason(t *testing.T) {
	r := NewRefusalLog(nil)
	t0 := time.Unix(1000, 0)
	for i := range RefusalBurst {
		if _, ok := r.allow("over capacity", "10.0.0."+string(rune('a'+i)), t0); !ok {
			t.Fatalf("line %d of the burst was not written", i+1)
		}
	}
	if _, ok := r.allow("over capacity", "10.0.0.z", t0); ok {
		t.Fatalf("line %d, one past RefusalBurst, was written", RefusalBurst+1)
	}
	if _, ok := r.allow("handshake failed", "10.0.0.a", t0); !ok {
		t.Fatal("another reason shares the first one's budget")
	}
	if _, ok := r.allow("over capacity", "10.0.0.y", t0.Add(RefusalInterval-1)); ok {
		t.Fatal("a line just inside the interval was written")
	}
	if n, ok := r.allow("over capacity", "10.0.0.a", t0.Add(RefusalInterval)); !ok || n != 2 {
		t.Fatalf("at the next interval: written %v, not_logged %d; want true, 2", ok, n)
	}
}

// One address writes one line per interval per reason, however often it
// reconnects; others still get theirs.
func TestRefusalLogOneLinePerAddress(t *testing.T) {
	r := NewRefusalLog(nil)
	t0 := time.Unix(1000, 0)
	if _, ok := r.allow("malformed frame", "192.0.2.1", t0); !ok {
		t.Fatal("the first line was not written")
	}
	for range 1000 {
		if _, ok := r.allow("malformed frame", "192.0.2.1", t0); ok {
			t.Fatal("a second line from the same address was written within the interval")
		}
	}
	if _, ok := r.allow("malformed frame", "192.0.2.2", t0); !ok {
		t.Fatal("another address lost its line to the first one's flood")
	}
}

// A flood of 34,000 refusals from one address over 10 s writes at most
// RefusalBurst lines a second, each with a count of those not written.
func TestRefusalLogFloodIsBounded(t *testing.T) {
	var buf bytes.Buffer
	r := NewRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 34000 {
		r.Warn("moonbridge: registration refused", "198.51.100.7", "why", "bad key")
	}
	written, suppressed := r.Counts()
	if lines := strings.Count(buf.String(), "\n"); lines != int(written) || written > RefusalBurst*11 {
		t.Fatalf("%d lines written (%d counted); want at most %d", lines, written, RefusalBurst*11)
	}
	if written+suppressed != 34000 {
		t.Fatalf("written %d + suppressed %d, want 34000", written, suppressed)
	}
}
