package sendq

// Frames encoded in place in the pending batch: order with queued
// messages, deadlines and ttl, the bounds at and past the edge, waiting
// for room, and writing from the caller's goroutine.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// appendEvent encodes a stream event in place and commits it (through the
// caller when through is set).
func appendEvent(t *testing.T, q *Queue, command string, deadline time.Time, through bool) {
	t.Helper()
	b, ok := q.Reserve(64 + len(command))
	if !ok {
		t.Fatalf("%s: refused", command)
	}
	var off int
	*b, off = hotpath.AppendEvent(*b, wire.TypeStream, command, []byte("id-"+command), []byte("body"), !deadline.IsZero())
	if through {
		q.CommitThrough(off, deadline)
	} else {
		q.Commit(off, deadline)
	}
}

func TestInPlaceFramesKeepOrderDeadlinesAndTTL(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	appendEvent(t, q, "one", time.Time{}, false)
	q.Enqueue(wire.New(wire.TypeEvent, "two"), time.Time{})
	appendEvent(t, q, "expired", time.Now().Add(-time.Millisecond), false)
	appendEvent(t, q, "three", time.Now().Add(2*time.Second), false)
	appendEvent(t, q, "four", time.Time{}, false)
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	r := wire.NewReader(b)
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"one", "two", "three", "four"} {
		m, err := r.ReadMessage()
		if err != nil || m.Value(wire.HeaderCommand) != want {
			t.Fatalf("want %s: %q %v", want, m, err)
		}
		ttl, hasTTL := m.Get(wire.HeaderTTL)
		if want == "three" {
			if n, err := strconv.Atoi(ttl); err != nil || n <= 0 || n > 2000 {
				t.Fatalf("ttl %q", ttl)
			}
		} else if hasTTL {
			t.Fatalf("%s carries a ttl %q", want, ttl)
		}
	}
	if q.Expired() != 1 {
		t.Fatalf("expired = %d", q.Expired())
	}
}

func TestInPlaceFramesCountAgainstTheLimits(t *testing.T) {
	a, _ := pair(t)
	q := New(a, Limits{MaxMessages: 2, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	appendEvent(t, q, "a", time.Time{}, false)
	appendEvent(t, q, "b", time.Time{}, false) // at the message limit
	if _, ok := q.Reserve(64); ok {
		t.Fatal("reserved past the message limit")
	}
	q = New(a, Limits{MaxMessages: 100, MaxBytes: 200, WriteTimeout: time.Second})
	b, _ := q.Reserve(200)
	*b = append(*b, make([]byte, 100)...)
	q.Commit(-1, time.Time{})
	if b, ok := q.Reserve(100); !ok { // exactly at MaxBytes
		t.Fatal("refused at the byte limit")
	} else {
		*b = append(*b, make([]byte, 100)...)
		q.Commit(-1, time.Time{})
	}
	if _, ok := q.Reserve(1); ok {
		t.Fatal("reserved past the byte limit")
	}
	q = New(a, Limits{MaxMessages: 100, MaxBytes: 10, WriteTimeout: time.Second})
	if _, ok := q.Reserve(4096); !ok {
		t.Fatal("an oversize frame was refused by an empty queue")
	}
	q.Commit(-1, time.Time{}) // nothing appended: an empty frame, for the test
	q.Close(nil)
	if _, ok := q.Reserve(1); ok {
		t.Fatal("reserved on a closed queue")
	}
}

func TestReserveWaitWaitsForRoom(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 2, MaxBytes: 1 << 20, WriteTimeout: 5 * time.Second})
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	// Three producers push 300 frames through a 2-message queue; the
	// reader sees every one, each producer's in its order.
	const n = 300
	errs := make(chan error, 3)
	for p := range 3 {
		go func() {
			for i := range n / 3 {
				buf, err := q.ReserveWait(context.Background(), 64)
				if err != nil {
					errs <- err
					return
				}
				var off int
				*buf, off = hotpath.AppendEvent(*buf, wire.TypeStream, "p"+strconv.Itoa(p), []byte(strconv.Itoa(i)), nil, false)
				q.Commit(off, time.Time{})
			}
			errs <- nil
		}()
	}
	r := wire.NewReader(b)
	next := map[string]int{}
	for i := range n {
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := r.ReadMessage()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		p := m.Value(wire.HeaderCommand)
		if got := m.Value(wire.HeaderID); got != strconv.Itoa(next[p]) {
			t.Fatalf("%s: message %s, want %d", p, got, next[p])
		}
		next[p]++
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitEnds(t, a, func(q *Queue, ctx context.Context) error {
		buf, err := q.ReserveWait(ctx, 64)
		if err == nil {
			*buf = append(*buf, "not a frame: the test never runs the queue"...)
			q.Commit(-1, time.Time{})
		}
		return err
	})
}

func TestCommitThroughWritesFromTheCaller(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	r := wire.NewReader(b)
	// Run is not started: only the callers write. What was queued before
	// leaves first, in order, with the caller's frame.
	q.Enqueue(wire.New(wire.TypeEvent, "queued"), time.Time{})
	appendEvent(t, q, "committed", time.Time{}, false)
	appendEvent(t, q, "through", time.Now().Add(time.Second), true)
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"queued", "committed", "through"} {
		if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != want {
			t.Fatalf("want %s: %q %v", want, m, err)
		}
	}
	// A batch being written (the test holds the write lock, as a writer
	// would): CommitThrough returns at once, wakes nobody, and leaves its
	// frame to the holder, who takes it with its next batch.
	q.wmu.Lock()
	appendEvent(t, q, "later", time.Time{}, true)
	select {
	case <-q.wake:
		t.Fatal("the writer goroutine was woken")
	default:
	}
	if err := q.writeBatches(maxWriteAgain); err != nil { // the holder's batch
		t.Fatal(err)
	}
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != "later" {
		t.Fatalf("%q %v", m, err)
	}
	// A write-through of a message finding frames queued behind its lock
	// wakes the writer for them.
	q.wmu.Lock()
	appendEvent(t, q, "behind", time.Time{}, true)
	q.unlockWriter()
	go q.Run()
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != "behind" {
		t.Fatalf("%q %v", m, err)
	}
	q.Close(nil)
	<-q.Done()
}

func TestStagedFramesLeaveOnFlushThrough(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	for _, c := range []string{"r1", "r2", "r3"} {
		buf, ok := q.Reserve(64)
		if !ok {
			t.Fatal("refused")
		}
		var off int
		*buf, off = hotpath.AppendEvent(*buf, wire.TypeResponse, c, []byte("id"), nil, false)
		q.Stage(off, time.Time{})
	}
	select {
	case <-q.wake:
		t.Fatal("Stage woke the writer")
	default:
	}
	q.FlushThrough() // Run never started: the caller writes all three
	r := wire.NewReader(b)
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"r1", "r2", "r3"} {
		if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != want {
			t.Fatalf("want %s: %q %v", want, m, err)
		}
	}
}

func TestInPlaceBurstSpansSegments(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10000, MaxBytes: 8 << 20, WriteTimeout: 5 * time.Second})
	// More than one segment of small frames, one frame larger than a
	// segment, then more small ones: all leave, in order, whole.
	const n = 3 * pendSegment / 100
	body := make([]byte, 60)
	big := make([]byte, pendSegment+1000)
	for i := range 2 * n {
		payload := body
		if i == n {
			payload = big
		}
		buf, ok := q.Reserve(hotpath.EventLen(wire.TypeStream, "c", 8, len(payload), false))
		if !ok {
			t.Fatalf("frame %d refused", i)
		}
		var off int
		*buf, off = hotpath.AppendEvent(*buf, wire.TypeStream, "c", []byte(strconv.Itoa(i)), payload, false)
		q.Commit(off, time.Time{})
	}
	if len(q.segs) < 4 {
		t.Fatalf("%d segments: the burst should span several", len(q.segs))
	}
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	r := wire.NewReader(b)
	for i := range 2 * n {
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := r.ReadMessage()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		want := len(body)
		if i == n {
			want = len(big)
		}
		if m.Value(wire.HeaderID) != strconv.Itoa(i) || len(m.Body()) != want {
			t.Fatalf("frame %d: id %s, %d bytes", i, m.Value(wire.HeaderID), len(m.Body()))
		}
	}
}
