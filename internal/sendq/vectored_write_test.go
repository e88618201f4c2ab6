package sendq

// Frames encoded in place leave in vectored writes: the segments of a
// batch in one writev, by the writer and by a flush in place, in order,
// with progress recorded as the socket takes bytes, allocating nothing.

import (
	"io"
	"strconv"
	"testing"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// reserveEvents encodes n stream events of body bytes in place, with ids
// from first on, and stages them (no writer is woken).
func reserveEvents(t *testing.T, q *Queue, first, n int, body []byte) {
	t.Helper()
	for i := first; i < first+n; i++ {
		id := strconv.Itoa(i)
		buf, ok := q.Reserve(hotpath.EventLen(wire.TypeStream, "c", len(id), len(body), false))
		if !ok {
			t.Fatalf("frame %d refused", i)
		}
		var off int
		*buf, off = hotpath.AppendEvent(*buf, wire.TypeStream, "c", []byte(id), body, false)
		q.Stage(off, time.Time{})
	}
}

// readEvents reads n events and checks their ids run from first on.
func readEvents(t *testing.T, r *wire.Reader, first, n, bodyLen int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		m, err := r.ReadMessage()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if m.Value(wire.HeaderID) != strconv.Itoa(i) || len(m.Body()) != bodyLen {
			t.Fatalf("frame %d: id %s, %d bytes", i, m.Value(wire.HeaderID), len(m.Body()))
		}
	}
}

// A batch of 16 KiB frames, one segment each, leaves in one write system
// call, not one per frame.
func TestInPlaceSegmentsLeaveInOneVectoredWrite(t *testing.T) {
	a, b := pairInPlace(t)
	q := New(a, Limits{MaxMessages: 100, MaxBytes: 8 << 20, WriteTimeout: 5 * time.Second})
	if q.out.raw == nil {
		t.Fatal("a socket pair has a descriptor: the test needs the vectored sink")
	}
	body := make([]byte, 16<<10)
	const n = 6 // ~100 KB: under one vectored write's bound
	reserveEvents(t, q, 0, n, body)
	if len(q.segs) != n {
		t.Fatalf("%d segments for %d frames of 16 KiB", len(q.segs), n)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		readEvents(t, wire.NewReader(b), 0, n, len(body))
	}()
	before := q.out.writes
	q.FlushThrough()
	<-done
	if got := q.out.writes - before; got != 1 {
		t.Fatalf("%d writes for one batch of %d segments, want 1", got, n)
	}
}

// A flush in place hands the segments to one non-blocking writev; what
// the socket refuses is kept whole and in order, behind what it took,
// and the writer finishes it.
func TestFlushInPlaceOfSegmentsKeepsWhatTheSocketRefused(t *testing.T) {
	a, b := pairInPlace(t)
	smallBuffer(t, a)
	q := New(a, Limits{MaxMessages: 1000, MaxBytes: 8 << 20, WriteTimeout: 10 * time.Second})
	body := make([]byte, 10<<10)
	const n = 30 // ~300 KB: far past what the socket pair buffers
	reserveEvents(t, q, 0, n, body)
	before := q.LastWrite()
	q.Flush() // the peer reads nothing yet: this must return
	if len(q.out.rest) == 0 {
		t.Fatal("the socket took everything; the test needs a larger batch")
	}
	if !q.LastWrite().After(before) {
		t.Fatal("bytes went to the socket but no progress was recorded")
	}
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	q.Wake()
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	readEvents(t, wire.NewReader(b), 0, n, len(body))
}

// A writer blocked in a vectored write to a peer that reads slowly
// records progress each time the socket takes bytes, not only once the
// whole write is done: a stalled publisher waits for the subscriber's
// writer to stop making progress, not for a large write to end.
func TestABlockedVectoredWriteRecordsProgress(t *testing.T) {
	a, b := pairInPlace(t)
	smallBuffer(t, a)
	q := New(a, Limits{MaxMessages: 1000, MaxBytes: 8 << 20, WriteTimeout: 10 * time.Second})
	body := make([]byte, 10<<10)
	const n = 10 // ~100 KB: one vectored write, several socket buffers' worth
	reserveEvents(t, q, 0, n, body)
	start := q.LastWrite()
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	q.Wake()
	// The first writev takes what the socket buffers and the writer then
	// waits: that partial write is progress.
	for deadline := time.Now().Add(5 * time.Second); !q.LastWrite().After(start); {
		if time.Now().After(deadline) {
			t.Fatal("no progress recorded while the write was blocked")
		}
		time.Sleep(time.Millisecond)
	}
	q.mu.Lock()
	writing := q.writing
	q.mu.Unlock()
	if writing == 0 {
		t.Fatal("the batch was done before the peer read: the test needs a larger batch")
	}
	// Reading a little lets the write go on, and each step is progress.
	r := wire.NewReader(b)
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	mid := q.LastWrite()
	readEvents(t, r, 0, 2, len(body))
	for deadline := time.Now().Add(5 * time.Second); !q.LastWrite().After(mid); {
		if time.Now().After(deadline) {
			t.Fatal("no progress recorded after the peer read part of the write")
		}
		time.Sleep(time.Millisecond)
	}
	readEvents(t, r, 2, n-2, len(body))
}

// Vectored writes allocate nothing: the writer's and a flush in place's.
func TestVectoredWritesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled segments at random")
	}
	a, b := pairInPlace(t)
	q := New(a, Limits{MaxMessages: 100, MaxBytes: 8 << 20, WriteTimeout: time.Minute})
	body := make([]byte, 20<<10) // one segment each
	sink := make([]byte, 64<<10)
	frameLen := hotpath.EventLen(wire.TypeStream, "c", 2, len(body), false) // ids 10 and 11
	for _, through := range []bool{false, true} {
		allocs := testing.AllocsPerRun(100, func() {
			reserveEvents(t, q, 10, 2, body)
			if through {
				q.FlushThrough()
			} else {
				q.Flush()
			}
			if _, err := io.ReadFull(b, sink[:2*frameLen]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("through %v: %v allocations per vectored write", through, allocs)
		}
	}
}
