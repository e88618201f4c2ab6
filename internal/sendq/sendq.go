// Package sendq is the outbound half of a busbar connection, shared by the
// broker and the client: a bounded queue of messages and the one goroutine
// that writes them. The writer drains everything queued, flushes once, then
// waits (batching without timers); a message whose deadline passed while
// queued is dropped, never sent, and one still in time leaves with its
// remaining budget stamped in its ttl header.
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
	m        *wire.Message // or
	f        *Frame        // an encoded frame, shared
	deadline time.Time     // zero: none
}

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
	inplace  []item
	behind   bool // a Flush left bytes the socket refused; until the writer empties the queue, Flush leaves the writing to it

	mu      sync.Mutex // guards the fields below
	items   []item
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
	unsendable atomic.Int64 // messages the encoder refused (a bug upstream)
}

// New returns a queue writing to nc. Start it with go q.Run().
func New(nc net.Conn, l Limits) *Queue {
	q := &Queue{
		nc: nc, limits: l,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	q.out = newSink(nc, &q.lastWrite)
	q.w = wire.NewWriter(q.out)
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
	q.items = append(q.items, item{m: m, deadline: deadline})
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
	defer q.wmu.Unlock()
	q.mu.Lock()
	idle := !q.closed.Load() && len(q.items) == 0
	q.mu.Unlock()
	if !idle {
		return false
	}
	one := [1]item{{m: m, deadline: deadline}}
	if err := q.write(q.w, one[:], q.limits.WriteTimeout); err != nil {
		q.Close(nil)
	}
	return true
}

// ErrClosed is returned by EnqueueFrameWait on a closed queue.
var ErrClosed = errors.New("sendq: closed")

// EnqueueFrameWait queues a shared frame like EnqueueFrame, waiting for
// room while the queue is full: the flow control of a producer that must
// not drop. It returns ctx's error if ctx ends first, ErrClosed if the
// queue closes.
func (q *Queue) EnqueueFrameWait(ctx context.Context, f *Frame, deadline time.Time) error {
	return waitRoom(q, ctx.Done(), ctx.Err, func() bool { return q.addFrameLocked(f, deadline) })
}

// EnqueueFrameWithin is EnqueueFrame waiting at most wait for room: the
// short stall a broker imposes on a fast producer before it drops.
func (q *Queue) EnqueueFrameWithin(f *Frame, deadline time.Time, wait time.Duration) bool {
	if q.EnqueueFrame(f, deadline) {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	return waitRoom(q, t.C, nil, func() bool { return q.addFrameLocked(f, deadline) }) == nil
}

// errGaveUp is waitRoom's error when its done channel fired and no cause was given.
var errGaveUp = errors.New("sendq: gave up waiting for room")

// waitRoom runs add under q's lock until it succeeds, waiting for room between
// tries, until done fires (then cause(), or errGaveUp).
func waitRoom[T any](q *Queue, done <-chan T, cause func() error, add func() bool) error {
	for {
		q.mu.Lock()
		if q.closed.Load() {
			q.mu.Unlock()
			return ErrClosed
		}
		if add() {
			q.mu.Unlock()
			q.signal()
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
	ok := q.addFrameLocked(f, deadline)
	q.mu.Unlock()
	if ok {
		q.signal()
	}
	return ok
}

func (q *Queue) addFrameLocked(f *Frame, deadline time.Time) bool {
	if !q.fitsLocked(len(f.B)) {
		return false
	}
	f.refs.Add(1)
	q.items = append(q.items, item{f: f, deadline: deadline})
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

// Run writes until Close, or until a write fails (then it closes the queue
// itself and returns the error). It closes the connection before it returns,
// which unblocks the connection's reader.
func (q *Queue) Run() error {
	defer close(q.done)
	defer q.nc.Close()
	var batch []item
	for {
		select {
		case <-q.wake:
		case <-q.quit:
			q.wmu.Lock()
			_ = q.write(q.w, q.take(batch), finalFlushTimeout)
			q.wmu.Unlock()
			return nil
		}
		q.wmu.Lock()
		batch = q.take(batch)
		err := q.write(q.w, batch, q.limits.WriteTimeout)
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
		q.mu.Unlock()
		if err != nil {
			q.Close(nil)
			q.mu.Lock()
			releaseFrames(q.items) // never written: give them back
			q.items = nil
			q.mu.Unlock()
			return err
		}
		clear(batch) // let written messages be collected
	}
}

// writeFrame copies a shared frame into the writer's buffer and stamps the
// remaining ttl in that copy; an expired one is dropped.
func (q *Queue) writeFrame(w *wire.Writer, it item, now time.Time) error {
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

func (q *Queue) take(spare []item) []item {
	q.mu.Lock()
	items := q.items
	q.items = spare[:0]
	q.writing = q.bytes + len(q.out.rest) // the caller holds wmu
	q.bytes = 0
	q.mu.Unlock()
	return items
}

func (q *Queue) write(w *wire.Writer, batch []item, timeout time.Duration) error {
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
	for i := range batch {
		before := w.Buffered()
		err := q.writeItem(w, &batch[i], now)
		if w.Buffered() < before {
			// The writer flushed by itself: progress, even inside a big batch.
			q.lastWrite.Store(time.Now().UnixNano())
		}
		if err != nil {
			releaseFrames(batch[i+1:])
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	q.lastWrite.Store(time.Now().UnixNano())
	return nil
}

// writeItem encodes or copies one queued item into the writer; an expired
// one is dropped, an unsendable one skipped.
func (q *Queue) writeItem(w *wire.Writer, it *item, now time.Time) error {
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
