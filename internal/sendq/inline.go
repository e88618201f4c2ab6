package sendq

import (
	"context"
	"sync"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// Frames encoded in place: a producer that can encode its own frame (a
// client's Emit, request or reply) appends it straight to the queue's
// pending batch under the queue's lock, and the writer hands that batch to
// the socket as it is — no frame of its own, no copy into the writer's
// buffer (nats.go appends to its connection buffer the same way):
//
//	b, ok := q.Reserve(size)   // the lock is held from here when ok
//	*b, ttlOff = hotpath.AppendEvent(*b, ...)
//	q.Commit(ttlOff, deadline) // or CommitThrough, Stage; releases the lock
//
// The bounds are the queue's (MaxBytes, MaxMessages), a deadline is kept as
// for a queued message (dropped once past, its ttl stamped in place when
// written), and the order is the queue's: in-place frames and queued
// messages leave in the order they were queued.

// The pending batch is a list of segments, so a burst that outruns the
// writer never copies what it queued to grow a buffer: a frame that does
// not fit the last segment starts a new one. pendSegment is a segment's
// size (a larger frame gets one of its own size). Written segments go back
// to a pool shared by every queue of the process, which the garbage
// collector empties once they sit unused: a queue keeps nothing of a burst.
const pendSegment = 32 << 10

var segPool = sync.Pool{New: func() any { return new([]byte) }}

// getSegment returns an empty segment with room for size bytes.
func getSegment(size int) *[]byte {
	if size > pendSegment {
		s := make([]byte, 0, size)
		return &s
	}
	p := segPool.Get().(*[]byte)
	if *p == nil {
		*p = make([]byte, 0, pendSegment)
	}
	*p = (*p)[:0]
	return p
}

// putSegment gives a written segment back to the pool.
func putSegment(p *[]byte) {
	if cap(*p) == pendSegment {
		segPool.Put(p)
	}
}

// span is where an in-place frame lies in the pending batch: in segment
// seg, from start to end, its ttl digits at ttl (or -1).
type span struct {
	seg, start, end, ttl int32
}

// Reserve locks the queue for one frame of at most size bytes to be
// appended to the returned buffer, and reports true; the caller appends
// exactly one frame and calls Commit, CommitThrough or Stage, which unlock it.
// It reports false, holding nothing, when the queue is closing or full
// (the bounds as for Enqueue, size counted against MaxBytes).
func (q *Queue) Reserve(size int) (*[]byte, bool) { return q.reserve(size, false) }

// ReservePaced is Reserve below the pace mark (ReserveShare): a broker
// forwarding a stream frame into a subscriber's queue.
func (q *Queue) ReservePaced(size int) (*[]byte, bool) { return q.reserve(size, true) }

func (q *Queue) reserve(size int, paced bool) (*[]byte, bool) {
	q.mu.Lock()
	if !q.fitsAsLocked(size, paced) {
		q.mu.Unlock()
		return nil, false
	}
	return q.reserveLocked(size), true
}

// ReserveWait is Reserve waiting for room while the queue is full: the
// flow control of a producer that must not drop. It returns ctx's error
// if ctx ends first, ErrClosed if the queue closes; on nil the lock is
// held, as after Reserve.
func (q *Queue) ReserveWait(ctx context.Context, size int) (*[]byte, error) {
	if err := waitLocked(q, ctx.Done(), ctx.Err, func() bool { return q.fitsLocked(size) }); err != nil {
		return nil, err
	}
	return q.reserveLocked(size), nil
}

// reserveLocked returns the segment the next frame is appended to, with
// room for size bytes.
func (q *Queue) reserveLocked(size int) *[]byte {
	n := len(q.segs)
	if n == 0 || cap(*q.segs[n-1])-len(*q.segs[n-1]) < size {
		q.segs = append(q.segs, getSegment(size))
		n++
	}
	q.resAt = len(*q.segs[n-1])
	return q.segs[n-1]
}

// commitLocked records the frame appended since Reserve; ttlOff is the
// offset of its ttl digits in the buffer Reserve returned (hotpath's
// encoders return it so), or -1.
func (q *Queue) commitLocked(ttlOff int, deadline time.Time) {
	seg := len(q.segs) - 1
	end := len(*q.segs[seg])
	at := span{seg: int32(seg), start: int32(q.resAt), end: int32(end), ttl: int32(ttlOff)}
	q.items = append(q.items, item{at: at, deadline: hotpath.At(deadline), cost: int32(end - q.resAt)})
	q.bytes += end - q.resAt
}

// Commit queues the frame appended since Reserve, unlocks the queue and
// wakes the writer.
func (q *Queue) Commit(ttlOff int, deadline time.Time) {
	q.commitLocked(ttlOff, deadline)
	q.mu.Unlock()
	q.signal()
}

// CommitThrough is Commit that writes from the caller's goroutine when no
// batch is being written: it takes everything queued (its own frame and
// whatever others queued before it) and writes it as the writer would,
// saving the writer's wake-up; when a batch is being written it leaves its
// frame to whoever writes it, who looks again once done (writeBatches).
// Order is kept: batches are taken and written one at a time under the
// write lock. A write error closes the
// queue, as in Run. Only goroutines that may block on the socket for up
// to WriteTimeout may call it (never a reader).
func (q *Queue) CommitThrough(ttlOff int, deadline time.Time) {
	q.commitLocked(ttlOff, deadline)
	q.mu.Unlock()
	q.FlushThrough()
}

// Stage queues the frame appended since Reserve and unlocks the queue
// without waking the writer: the caller queues more and then calls
// FlushThrough or Flush (which it must), so a batch of replies, or what
// a broker's reader routed from one read, leaves in one write.
func (q *Queue) Stage(ttlOff int, deadline time.Time) {
	q.commitLocked(ttlOff, deadline)
	q.mu.Unlock()
}

// FlushThrough writes what is queued from the caller's goroutine when no
// batch is being written, and otherwise wakes the writer. The rules are
// CommitThrough's: it ends a batch of frames queued with Stage.
func (q *Queue) FlushThrough() {
	if !q.wmu.TryLock() {
		// Whoever holds it looks again once it has written its batch
		// (writeBatches): ours is taken then, with no wake-up.
		return
	}
	_ = q.writeBatches(maxWriteAgain) // a write error closed the queue; Run ends on it
}

// maxWriteAgain bounds the further batches a producer writing through
// writes for others (frames queued while it wrote) before it leaves the
// rest to the writer goroutine: its own call returns within about two
// batch writes.
const maxWriteAgain = 1

// inlineRun is a run of consecutive in-place frames of one batch, written
// together (they lie back to back in one segment).
type inlineRun struct {
	b               []byte // the segment the run is in
	seg, start, end int
}

// addInline adds an in-place frame to the run (the writer's side of
// Reserve): an expired one is dropped and breaks the run, a live one has
// its remaining budget stamped.
func (q *Queue) addInline(w *wire.Writer, run *inlineRun, it *item, now hotpath.Instant) error {
	pend := *q.batchSegs[it.at.seg] // the batch's segment (take moved it here)
	if !it.deadline.IsZero() && !now.Before(it.deadline) {
		q.expired.Add(1)
		return q.flushRun(w, run)
	}
	if it.at.ttl >= 0 && !it.deadline.IsZero() {
		hotpath.PatchTTL(pend[it.at.ttl:], max(1, it.deadline.Sub(now).Milliseconds()))
	}
	seg, start, end := int(it.at.seg), int(it.at.start), int(it.at.end)
	if run.b != nil && run.seg == seg && run.end == start {
		run.end = end
		return nil
	}
	if err := q.flushRun(w, run); err != nil {
		return err
	}
	*run = inlineRun{b: pend, seg: seg, start: start, end: end}
	return nil
}

// flushRun hands a run to the writer, without a copy when it can.
func (q *Queue) flushRun(w *wire.Writer, run *inlineRun) error {
	if run.b == nil || run.start == run.end {
		return nil
	}
	err := w.WriteDirect(run.b[run.start:run.end])
	*run = inlineRun{}
	return err
}
