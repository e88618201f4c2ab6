// Package sendq is the outbound half of a busbar connection, shared by the
// broker and the client: a bounded queue of messages and the goroutine
// that writes them. The writer drains everything queued, flushes once, then
// waits (batching without timers); a message whose deadline passed while
// queued is dropped, never sent, and one still in time leaves with its
// remaining budget stamped in its ttl header. A producer that may block on
// the socket can write a batch itself when the writer is idle
// (WriteThrough, CommitThrough), and one that encodes its own frames can
// append them to the pending batch in place (inline.go).
package sendq

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// Limits of one queue.
type Limits struct {
	MaxBytes     int           // bytes queued (frame sizes)
	MaxMessages  int           // messages queued
	WriteTimeout time.Duration // one batch write; past it the peer is a slow consumer
}

// finalFlushTimeout bounds the last write of a closing queue (the frame
// saying why it closes).
const finalFlushTimeout = time.Second

type item struct {
	m        *wire.Message   // or
	f        *Frame          // an encoded frame, shared, or (both nil)
	at       span            // a frame encoded in place in the pending batch (inline.go)
	deadline hotpath.Instant // zero: none
	cost     int32           // what it counts against MaxBytes (0: queued past the limits)
}

// An item is 48 bytes with two pointers: a queue holds one per message
// and the garbage collector scans the queue's slice every cycle, so a
// deadline is an Instant (a time.Time is 24 bytes and a pointer), and
// sizes are int32 (a frame is bounded by wire.MaxMessageBytes).

// Frame is an encoded stream frame (prefix included) that several queues
// share, as a fan-out does: each writer copies it into its own buffer and
// stamps the remaining ttl there, so nothing is encoded per destination.
// Frames are pooled; the last Release returns one.
type Frame struct {
	B      []byte // the frame
	TTLOff int    // offset in B of hotpath.TTLWidth ttl digits, or -1
	refs   atomic.Int32
}

// maxPooledFrame bounds the frames kept for reuse.
const maxPooledFrame = 64 << 10

var framePool = sync.Pool{New: func() any { return &Frame{B: make([]byte, 0, 512)} }}

// NewFrame returns an empty frame holding one reference.
func NewFrame() *Frame {
	f := framePool.Get().(*Frame)
	f.B, f.TTLOff = f.B[:0], -1
	f.refs.Store(1)
	return f
}

// Release drops one reference.
func (f *Frame) Release() {
	if f.refs.Add(-1) == 0 && cap(f.B) <= maxPooledFrame {
		framePool.Put(f)
	}
}

// Queue is a connection's outbound queue. Enqueue never blocks.
type Queue struct {
	nc     net.Conn
	limits Limits

	wmu sync.Mutex // held while bytes go to nc: by Run per batch, by WriteThrough, or by Flush
	// Guarded by wmu: the encoder, the socket under it, the write
	// deadline last set, and Flush's batch.
	w        *wire.Writer
	out      *sink
	deadline time.Time
	behind   bool // a Flush left bytes the socket refused; until the writer empties the queue, Flush leaves the writing to it

	// Owned by whoever holds wmu: the spare slices take swaps in.
	spare     []item
	batchSegs []*[]byte // the segments of the batch being written (take moves them here)

	mu      sync.Mutex // guards the fields below
	items   []item
	segs    []*[]byte     // frames encoded in place (Reserve), in the order of their items; appended to the last
	resAt   int           // where the frame being appended under Reserve starts in the last segment
	bytes   int           // cost of items
	writing int           // cost of the batch being written: it still counts against MaxBytes
	space   chan struct{} // closed (and replaced) when a batch frees room; nil when nobody waits

	// closed is set once, by Close under mu, so what mu guards is decided
	// knowing it; it is read under mu or, by Closing, without.
	closed atomic.Bool

	wake chan struct{} // 1-slot: items were queued
	quit chan struct{} // closed by Close
	done chan struct{} // closed when Run returned

	lastWrite  atomic.Int64 // unix nanoseconds of the last bytes handed to the socket
	expired    atomic.Int64 // messages dropped because their deadline passed
	wakes      atomic.Int64 // the writer goroutine's wake-ups
	unsendable atomic.Int64 // messages the encoder refused (a bug upstream)
}

// New returns a queue writing to nc. Start it with go q.Run().
func New(nc net.Conn, l Limits) *Queue {
	q := &Queue{
		nc: nc, limits: l,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	q.out = newSink(nc, &q.lastWrite)
	if q.out.raw != nil {
		q.w = wire.NewWriter(vectorSink{q.out})
	} else {
		q.w = wire.NewWriter(q.out)
	}
	q.lastWrite.Store(time.Now().UnixNano())
	return q
}

// frameCost is what a message counts against MaxBytes: its frame plus room
// for a stamped ttl.
func frameCost(m *wire.Message) int { return m.WireLen() + 32 }

// Enqueue queues m. It returns false, queueing nothing, when the queue is
// closing or full. deadline, if set, is when m stops being worth sending.
func (q *Queue) Enqueue(m *wire.Message, deadline time.Time) bool {
	q.mu.Lock()
	ok := q.addLocked(m, deadline)
	q.mu.Unlock()
	if ok {
		q.signal()
	}
	return ok
}

func (q *Queue) addLocked(m *wire.Message, deadline time.Time) bool {
	size := frameCost(m)
	if !q.fitsLocked(size) {
		return false
	}
	q.items = append(q.items, item{m: m, deadline: hotpath.At(deadline), cost: int32(size)})
	q.bytes += size
	return true
}

// fitsLocked reports whether size more bytes may be queued. A frame larger
// than MaxBytes still fits an empty queue: it is bounded by the frame
// limit, and refusing it forever would wedge its sender.
func (q *Queue) fitsLocked(size int) bool {
	used := q.bytes + q.writing
	return !q.closed.Load() && len(q.items) < q.limits.MaxMessages && (used == 0 || used+size <= q.limits.MaxBytes)
}

// ReserveShare is the share of a queue's limits (one part in ReserveShare,
// of MaxBytes and of MaxMessages) that paced frames do not fill: a
// producer that may be paced (a broker's stream publisher) is stalled at
// the pace mark, below the limits, and what is above it is a reserve for
// the moments a reader that is not frozen is merely not scheduled, when a
// stall runs out without its writer writing. Other traffic (events,
// requests, replies) is bounded by the limits themselves.
const ReserveShare = 4

// fitsAsLocked is fitsPacedLocked for a paced frame, else fitsLocked.
func (q *Queue) fitsAsLocked(size int, paced bool) bool {
	if paced {
		return q.fitsPacedLocked(size)
	}
	return q.fitsLocked(size)
}

// fitsPacedLocked is fitsLocked at the pace mark: the limits less their
// reserve (none for limits under ReserveShare), which are never above
// the limits themselves.
func (q *Queue) fitsPacedLocked(size int) bool {
	used := q.bytes + q.writing
	maxMsgs := q.limits.MaxMessages - q.limits.MaxMessages/ReserveShare
	maxBytes := q.limits.MaxBytes - q.limits.MaxBytes/ReserveShare
	return !q.closed.Load() && len(q.items) < maxMsgs && (used == 0 || used+size <= maxBytes)
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// WriteThrough writes m from the caller's goroutine when the queue is
// idle — nothing queued, no batch being written — saving the hand-off to
// the writer goroutine (as nats-server flushes in place). It reports false,
// having done nothing, when the queue is busy or closed: the caller then
// enqueues, and order is kept because only an idle queue is bypassed. A
// write error closes the queue, as in Run. Only goroutines that may block
// on the socket for up to WriteTimeout may call it (never a reader).
func (q *Queue) WriteThrough(m *wire.Message, deadline time.Time) bool {
	if !q.wmu.TryLock() {
		return false
	}
	defer q.unlockWriter()
	q.mu.Lock()
	idle := !q.closed.Load() && len(q.items) == 0
	q.mu.Unlock()
	if !idle {
		return false
	}
	one := [1]item{{m: m, deadline: hotpath.At(deadline)}}
	if err := q.write(q.w, one[:], q.limits.WriteTimeout, false); err != nil {
		q.Close(nil)
	}
	return true
}

// unlockWriter releases wmu and wakes the writer if frames were queued
// meanwhile: a FlushThrough that found wmu taken left them to the holder.
func (q *Queue) unlockWriter() {
	q.wmu.Unlock()
	q.mu.Lock()
	more := len(q.items) > 0
	q.mu.Unlock()
	if more {
		q.signal()
	}
}

// ErrClosed is returned by EnqueueFrameWait on a closed queue.
var ErrClosed = errors.New("sendq: closed")

// EnqueueFrameWait queues a shared frame like EnqueueFrame, waiting for
// room while the queue is full: the flow control of a producer that must
// not drop. It returns ctx's error if ctx ends first, ErrClosed if the
// queue closes.
func (q *Queue) EnqueueFrameWait(ctx context.Context, f *Frame, deadline time.Time) error {
	return waitRoom(q, ctx.Done(), ctx.Err, func() bool { return q.addFrameLocked(f, deadline, false) })
}

// EnqueueFrameWithin is EnqueueFrame waiting at most wait for room: the
// short stall a broker imposes on a fast producer before it drops. paced
// waits for room below the pace mark (ReserveShare), as
// EnqueuePacedHeld queues.
func (q *Queue) EnqueueFrameWithin(f *Frame, deadline time.Time, wait time.Duration, paced bool) bool {
	q.mu.Lock()
	ok := q.addFrameLocked(f, deadline, paced)
	q.mu.Unlock()
	if ok {
		q.signal()
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	return waitRoom(q, t.C, nil, func() bool { return q.addFrameLocked(f, deadline, paced) }) == nil
}

// errGaveUp is waitRoom's error when its done channel fired and no cause was given.
var errGaveUp = errors.New("sendq: gave up waiting for room")

// waitRoom runs add under q's lock until it succeeds, waiting for room between
// tries, until done fires (then cause(), or errGaveUp).
func waitRoom[T any](q *Queue, done <-chan T, cause func() error, add func() bool) error {
	if err := waitLocked(q, done, cause, add); err != nil {
		return err
	}
	q.mu.Unlock()
	q.signal()
	return nil
}

// waitLocked is waitRoom returning with q's lock held once try succeeded;
// it signals nobody.
func waitLocked[T any](q *Queue, done <-chan T, cause func() error, try func() bool) error {
	for {
		q.mu.Lock()
		if q.closed.Load() {
			q.mu.Unlock()
			return ErrClosed
		}
		if try() {
			return nil
		}
		// Full: wait for the writer to free room. Checked and armed under
		// one lock, so a batch finishing in between cannot be missed.
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		q.signal() // what fills the queue may be held for a Flush (EnqueueFrameHeld)
		select {
		case <-space:
		case <-q.quit:
			return ErrClosed
		case <-done:
			if cause != nil {
				return cause()
			}
			return errGaveUp
		}
	}
}

// EnqueueFrame queues a shared frame like Enqueue; on success the queue
// holds its own reference, released once the frame is written or dropped.
func (q *Queue) EnqueueFrame(f *Frame, deadline time.Time) bool {
	q.mu.Lock()
	ok := q.addFrameLocked(f, deadline, false)
	q.mu.Unlock()
	if ok {
		q.signal()
	}
	return ok
}

// addFrameLocked queues f if it fits the limits, or with paced the pace
// mark.
func (q *Queue) addFrameLocked(f *Frame, deadline time.Time, paced bool) bool {
	if !q.fitsAsLocked(len(f.B), paced) {
		return false
	}
	f.refs.Add(1)
	q.items = append(q.items, item{f: f, deadline: hotpath.At(deadline), cost: int32(len(f.B))})
	q.bytes += len(f.B)
	return true
}

// Close stops the queue once: nothing more is queued, final (if not nil)
// is queued past the limits, and Run writes what is queued within a short
// bound, closes the connection and returns. It reports whether this call
// closed the queue.
func (q *Queue) Close(final *wire.Message) bool {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return false
	}
	q.closed.Store(true)
	if final != nil {
		q.items = append(q.items, item{m: final})
	}
	q.mu.Unlock()
	close(q.quit)
	return true
}

// Closing reports whether Close was called.
func (q *Queue) Closing() bool { return q.closed.Load() }

// Done is closed when Run has returned and the connection is closed.
func (q *Queue) Done() <-chan struct{} { return q.done }

// LastWrite is when the writer last handed bytes to the connection: a
// flush, inside a batch or at its end. A writer blocked on a peer that does
// not read shows no progress.
func (q *Queue) LastWrite() time.Time { return time.Unix(0, q.lastWrite.Load()) }

// Expired counts messages dropped because their deadline passed in the queue.
func (q *Queue) Expired() int64 { return q.expired.Load() }

// Depth is what the queue holds, for an operator: messages waiting and
// the bytes they count against MaxBytes (the batch being written included).
func (q *Queue) Depth() (msgs, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items), q.bytes + q.writing
}

// Run writes until Close, or until a write fails (then it closes the queue
// itself and returns the error). It closes the connection before it returns,
// which unblocks the connection's reader.
func (q *Queue) Run() error {
	defer close(q.done)
	defer q.nc.Close()
	for {
		select {
		case <-q.wake:
			q.wakes.Add(1)
		case <-q.quit:
			q.wmu.Lock()
			_ = q.write(q.w, q.take(), finalFlushTimeout, false)
			q.wmu.Unlock()
			return nil
		}
		q.wmu.Lock()
		if err := q.writeBatches(-1); err != nil {
			return err
		}
	}
}

// WriterWakes counts the writer goroutine's wake-ups: a goroutine hand-off
// each, which a write from the producer's goroutine (WriteThrough,
// CommitThrough) saves. Tests count them so hand-offs cannot creep back
// onto a path that had none.
func (q *Queue) WriterWakes() int64 { return q.wakes.Load() }

// writeBatches writes what is queued and frees its room, with wmu held,
// which it releases. Frames queued while it wrote by producers that found
// wmu taken (FlushThrough) are left to whoever held it: after unlocking it
// looks again and writes those too when it can take wmu back — at most
// again more times (negative: no bound), then it wakes the writer — or
// leaves them to the new holder, whose batch is taken later. A write error
// closes the queue and is returned.
func (q *Queue) writeBatches(again int) error {
	for {
		select { // this batch takes what a pending wake-up was for
		case <-q.wake:
		default:
		}
		batch := q.take()
		err := q.write(q.w, batch, q.limits.WriteTimeout, true)
		q.recycle(batch)
		if q.behind && err == nil {
			q.mu.Lock()
			q.behind = len(q.items) > 0 // caught up: Flush may write in place again
			q.mu.Unlock()
		}
		q.wmu.Unlock()
		q.mu.Lock()
		q.writing = 0
		if q.space != nil { // wake every producer waiting for room
			close(q.space)
			q.space = nil
		}
		more := len(q.items) > 0 && !q.closed.Load()
		q.mu.Unlock()
		if err != nil {
			q.Close(nil)
			q.mu.Lock()
			releaseFrames(q.items) // never written: give them back
			q.items = nil
			for _, s := range q.segs {
				putSegment(s)
			}
			clear(q.segs)
			q.segs = q.segs[:0]
			q.mu.Unlock()
			return err
		}
		if !more {
			return nil
		}
		if again == 0 {
			q.signal()
			return nil
		}
		if !q.wmu.TryLock() {
			return nil // the holder takes them
		}
		again--
	}
}

// recycle keeps a written batch's items as the spare the next take swaps
// in, cleared so written messages can be collected, and gives its
// segments back to the pool (wmu held).
func (q *Queue) recycle(batch []item) {
	clear(batch)
	q.spare = batch[:0]
	for _, s := range q.batchSegs {
		putSegment(s)
	}
	clear(q.batchSegs)
	q.batchSegs = q.batchSegs[:0]
}

// writeFrame copies a shared frame into the writer's buffer and stamps the
// remaining ttl in that copy; an expired one is dropped.
func (q *Queue) writeFrame(w *wire.Writer, it item, now hotpath.Instant) error {
	if !it.deadline.IsZero() && !now.Before(it.deadline) {
		q.expired.Add(1)
		return nil
	}
	b, err := w.WriteRaw(it.f.B)
	if err != nil {
		return err
	}
	if it.f.TTLOff >= 0 && !it.deadline.IsZero() {
		hotpath.PatchTTL(b[it.f.TTLOff:], max(1, it.deadline.Sub(now).Milliseconds()))
	}
	return nil
}

// releaseFrames drops the references of frames that will not be written.
func releaseFrames(items []item) {
	for i := range items {
		if items[i].f != nil {
			items[i].f.Release()
			items[i].f = nil
		}
	}
}

// take hands what is queued to the holder of wmu, swapping in the spare
// items; the segments their in-place frames live in move to batchSegs,
// where they stay valid while written.
func (q *Queue) take() []item {
	q.mu.Lock()
	items := q.items
	q.items = q.spare[:0]
	q.segs, q.batchSegs = q.batchSegs[:0], q.segs
	q.writing = q.bytes + len(q.out.rest) // the caller holds wmu
	q.bytes = 0
	q.mu.Unlock()
	q.spare = nil
	return items
}

// write writes batch and flushes. counted says the batch is Run's, whose
// cost q.writing holds: each time the writer flushes by itself inside the
// batch, the room of what it wrote is given back at once and waiting
// producers are woken, so a producer stalled behind a big batch to a slow
// reader (or a link waiting for credit) waits for a buffer's worth of
// progress, not for the whole batch.
func (q *Queue) write(w *wire.Writer, batch []item, timeout time.Duration, counted bool) error {
	if len(batch) == 0 && len(q.out.rest) == 0 && q.out.err == nil {
		return nil
	}
	now := time.Now()
	// The deadline covers the whole batch: the writer flushes by itself
	// once its buffer is full, before the final Flush below.
	q.deadline = now.Add(timeout)
	_ = q.nc.SetWriteDeadline(q.deadline)
	// First what a Flush in place left (or the error it met).
	if len(q.out.rest) > 0 || q.out.err != nil {
		if err := q.out.finish(); err != nil {
			releaseFrames(batch)
			return err
		}
	}
	// The room of what reached the socket is given back as the writer
	// flushes by itself. An item's cost is "handed" once its bytes went to
	// w (an in-place frame when its run is written); when a step wrote to
	// the socket, everything handed before it has reached the socket, and
	// when w's buffer is empty after it, this step's too.
	buffered := 0     // cost handed to w, not yet known to be on the socket
	runCost := 0      // cost of the in-place frames of run, not yet handed
	var run inlineRun // consecutive in-place frames, written as one slice
	at := hotpath.At(now)
	for i := range batch {
		writes := q.out.writes
		handed := 0
		var err error
		if it := &batch[i]; it.m == nil && it.f == nil {
			prev := run
			err = q.addInline(w, &run, it, at)
			switch {
			case run.b == nil: // expired (dropped, freed) after the run was written
				handed, runCost = runCost+int(it.cost), 0
			case prev.b != nil && run.seg == prev.seg && run.start == prev.start: // joined the run
				runCost += int(it.cost)
			default: // started a run, after the previous one was written
				handed, runCost = runCost, int(it.cost)
			}
		} else if err = q.flushRun(w, &run); err == nil {
			err = q.writeItem(w, it, at)
			handed, runCost = runCost+int(it.cost), 0
		}
		if q.out.writes != writes {
			// Bytes reached the socket (w flushed by itself, or wrote a
			// run of in-place frames straight through): progress, even
			// inside a big batch.
			q.lastWrite.Store(time.Now().UnixNano())
			freed := buffered
			if buffered = handed; w.Buffered() == 0 {
				freed, buffered = freed+handed, 0
			}
			if counted {
				q.giveBack(freed)
			}
		} else {
			buffered += handed
		}
		if err != nil {
			releaseFrames(batch[i+1:])
			return err
		}
	}
	if err := q.flushRun(w, &run); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	q.lastWrite.Store(time.Now().UnixNano())
	return nil
}

// giveBack frees n bytes of the batch being written and wakes the
// producers waiting for room.
func (q *Queue) giveBack(n int) {
	q.mu.Lock()
	q.writing = max(0, q.writing-n)
	if q.space != nil {
		close(q.space)
		q.space = nil
	}
	q.mu.Unlock()
}

// writeItem encodes or copies one queued item into the writer; an expired
// one is dropped, an unsendable one skipped.
func (q *Queue) writeItem(w *wire.Writer, it *item, now hotpath.Instant) error {
	if it.f != nil {
		err := q.writeFrame(w, *it, now)
		it.f.Release()
		it.f = nil
		return err
	}
	var err error
	switch {
	case it.deadline.IsZero():
		err = w.WriteMessage(it.m)
	case !now.Before(it.deadline):
		q.expired.Add(1)
		return nil
	default:
		ttl := strconv.FormatInt(max(1, it.deadline.Sub(now).Milliseconds()), 10)
		err = w.WriteMessageWith(it.m, wire.HeaderTTL, ttl)
	}
	if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
		q.unsendable.Add(1) // refused before any byte was queued: the stream is fine
		return nil
	}
	return err
}
