package relay

import (
	"bytes"
	"testing"
)

// cachedEntries counts device's live entries whose blob is kept in memory.
func cachedEntries(s *Store, device string) (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.inboxes[device].entries {
		if !e.dead && e.data != nil {
			n++
		}
	}
	return n, s.cached
}

// Blobs are kept in memory from their push to their first delivery up to
// CacheBytes, exactly; past it they are read from the log. Either way a
// session delivers the same bytes, and a second session (which reads the
// log) too.
func TestCacheHoldsBlobsUpToItsLimit(t *testing.T) {
	s := open(t, "", Options{MaxPushRate: -1, CacheBytes: 200})
	blobs := [][]byte{bytes.Repeat([]byte("a"), 100), bytes.Repeat([]byte("b"), 100), bytes.Repeat([]byte("c"), 1)}
	var wants []want
	for _, b := range blobs {
		wants = append(wants, want{push(t, s, "d", b), b})
	}
	if n, b := cachedEntries(s, "d"); n != 2 || b != 200 {
		t.Fatalf("%d blobs, %d bytes kept; want 2 and 200 (the limit), the third past it", n, b)
	}
	checkInbox(t, s, "d", wants)
	if n, b := cachedEntries(s, "d"); n != 0 || b != 0 {
		t.Fatalf("after delivery %d blobs, %d bytes still kept", n, b)
	}
	checkInbox(t, s, "d", wants) // a new session, from the log
	// An ack before any delivery lets go of the kept copy too.
	seq := push(t, s, "d", []byte("x"))
	if _, b := cachedEntries(s, "d"); b != 1 {
		t.Fatalf("%d bytes kept, want 1", b)
	}
	if err := s.Ack("d", seq); err != nil {
		t.Fatal(err)
	}
	if _, b := cachedEntries(s, "d"); b != 0 {
		t.Fatalf("after the ack %d bytes kept, want 0", b)
	}
}

// A negative CacheBytes keeps nothing in memory.
func TestCacheOff(t *testing.T) {
	s := open(t, "", Options{MaxPushRate: -1, CacheBytes: -1})
	push(t, s, "d", []byte("x"))
	if n, b := cachedEntries(s, "d"); n != 0 || b != 0 {
		t.Fatalf("%d blobs, %d bytes kept with the cache off", n, b)
	}
}
