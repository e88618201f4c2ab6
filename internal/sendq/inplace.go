package sendq

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"busbar/internal/hotpath"
)

// Flushing in place. A broker's reader routes every frame a read brought
// in before it reads again. Waking each destination's writer per frame
// costs a goroutine hand-off per frame; instead the reader queues with
// EnqueueFrameHeld and, once the batch is routed, calls Flush on each
// destination it touched: when that destination's writer is idle, the
// reader writes the batch to the socket itself, without blocking (a
// non-blocking write system call), and whatever the socket does not take
// at once is left for the writer to finish, and later batches go to the
// writer too until it finds the queue empty (the peer caught up). A slow
// or frozen peer therefore costs the reader one system call, never a
// wait.

// sink is the io.Writer under a queue's wire.Writer. Guarded by the
// queue's wmu.
type sink struct {
	nc  net.Conn
	raw syscall.RawConn // nil: the connection has no descriptor (TLS, WebSocket); no flushing in place
	// nonblock is set while a Flush writes: a write the socket cannot take
	// at once is kept in rest instead of waited for.
	nonblock bool
	rest     []byte        // accepted from the wire.Writer, not yet on the socket; goes before anything else
	wrote    bool          // a non-blocking write put bytes on the socket
	err      error         // a write failed: the stream is broken, sticky
	progress *atomic.Int64 // the queue's lastWrite
	writes   int           // blocking writes to the socket so far: the writer's progress within a batch
	try      nbWrite       // the write tryWrite is doing
	tryFn    func(fd uintptr) bool

	vec [][]byte   // writev's copy of the caller's slices, advanced past what each call wrote; reused
	sys sysScratch // the system's vectored write's own buffers (writev_*.go)
}

// maxKeptRest bounds the rest buffer's capacity kept for reuse.
const maxKeptRest = 64 << 10

func newSink(nc net.Conn, progress *atomic.Int64) *sink {
	s := &sink{nc: nc, progress: progress}
	s.tryFn = s.writeNow
	s.raw = rawConn(nc)
	return s
}

func (s *sink) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.nonblock {
		if len(s.rest) > 0 { // in order, behind what is already waiting
			s.rest = append(s.rest, p...)
			return len(p), nil
		}
		n, err := s.tryWrite(p)
		if err != nil {
			s.err = err
			return n, err
		}
		s.wrote = s.wrote || n > 0
		s.rest = append(s.rest, p[n:]...)
		return len(p), nil
	}
	if err := s.finish(); err != nil {
		return 0, err
	}
	n, err := s.nc.Write(p)
	s.writes++
	if err != nil {
		s.err = err
	}
	return n, err
}

// vectorSink is the sink of a connection with a descriptor: the
// wire.Writer above it gathers the frames encoded in place into one
// writev (wire.VectorWriter). A connection without one (TLS, WebSocket)
// gets the plain sink, and a write per slice.
type vectorSink struct{ *sink }

// WriteVector writes bufs as one, with writev; in a Flush in place
// without waiting, keeping in rest what the socket refused, as Write does.
func (s vectorSink) WriteVector(bufs [][]byte) (int64, error) {
	if s.err != nil {
		return 0, s.err
	}
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if s.nonblock {
		n := 0
		if len(s.rest) == 0 {
			var err error
			if n, err = s.writev(bufs, false); err != nil {
				s.err = err
				return int64(n), err
			}
			s.wrote = s.wrote || n > 0
		}
		for _, b := range bufs { // in order, behind what is already waiting
			skip := min(n, len(b))
			s.rest = append(s.rest, b[skip:]...)
			n -= skip
		}
		return int64(total), nil
	}
	if err := s.finish(); err != nil {
		return 0, err
	}
	n, err := s.writev(bufs, true)
	s.writes++
	if err != nil {
		s.err = err
	}
	return int64(n), err
}

// restChunk is how much of rest finish writes at a time: progress is
// recorded after each, as the writer records each flush of a long batch,
// so a producer stalled for room sees a slow peer progress.
const restChunk = 32 << 10

// finish writes rest, blocking up to the connection's write deadline.
func (s *sink) finish() error {
	if s.err != nil || len(s.rest) == 0 {
		return s.err
	}
	for off := 0; off < len(s.rest); off += restChunk {
		if _, err := s.nc.Write(s.rest[off:min(off+restChunk, len(s.rest))]); err != nil {
			s.err = err
			return err
		}
		s.progress.Store(time.Now().UnixNano())
	}
	if cap(s.rest) > maxKeptRest {
		s.rest = nil
	} else {
		s.rest = s.rest[:0]
	}
	return nil
}

// tryWrite writes what the socket takes of p without waiting. The
// callback RawConn.Write runs is bound once (newSink) and finds p and
// its results in the sink, so a flush in place allocates nothing.
func (s *sink) tryWrite(p []byte) (int, error) {
	s.try = nbWrite{p: p}
	cerr := s.raw.Write(s.tryFn)
	n, err := s.try.n, s.try.err
	s.try = nbWrite{}
	if errors.Is(cerr, os.ErrDeadlineExceeded) {
		cerr = nil // nothing written: the writer sets a fresh deadline and writes it
	}
	if err == nil {
		err = cerr
	}
	return n, err
}

// nbWrite is one non-blocking write's bytes and results: p, or the
// slices of a writev when vec is set.
type nbWrite struct {
	p    []byte
	vec  [][]byte
	wait bool // vec only: wait for the socket to take all of it
	n    int
	err  error
}

// writev writes bufs with writev calls: all of them, waiting for the
// socket up to its write deadline, when wait is set (each call that took
// bytes is progress, as a blocking write is); otherwise what the socket
// takes at once.
func (s *sink) writev(bufs [][]byte, wait bool) (int, error) {
	s.vec = s.vec[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			s.vec = append(s.vec, b)
		}
	}
	s.try = nbWrite{vec: s.vec, wait: wait}
	cerr := s.raw.Write(s.tryFn)
	n, err := s.try.n, s.try.err
	s.try = nbWrite{}
	clear(s.vec) // drop the references to the caller's bytes
	if !wait && errors.Is(cerr, os.ErrDeadlineExceeded) {
		cerr = nil // nothing written: the writer sets a fresh deadline and writes it
	}
	if err == nil {
		err = cerr
	}
	return n, err
}

// EnqueueFrameHeld queues a shared frame like EnqueueFrame without waking
// the writer: the caller promises a Flush once it has queued the batch it
// is routing.
func (q *Queue) EnqueueFrameHeld(f *Frame, deadline time.Time) bool {
	q.mu.Lock()
	ok := q.addFrameLocked(f, deadline, false)
	q.mu.Unlock()
	return ok
}

// EnqueuePacedHeld is EnqueueFrameHeld below the pace mark: it refuses a
// frame that would take the queue into its reserve (ReserveShare).
func (q *Queue) EnqueuePacedHeld(f *Frame, deadline time.Time) bool {
	q.mu.Lock()
	ok := q.addFrameLocked(f, deadline, true)
	q.mu.Unlock()
	return ok
}

// Wake wakes the writer for what was queued with EnqueueFrameHeld,
// EnqueuePacedHeld or Stage, when no Flush will follow.
func (q *Queue) Wake() { q.signal() }

// Flush sends what is queued. When the writer is idle and the connection
// has a descriptor, it writes from the caller's goroutine without
// blocking, leaving to the writer whatever the socket did not take;
// otherwise it wakes the writer. It never waits for the peer, so a reader
// may call it.
func (q *Queue) Flush() {
	if q.out.raw == nil || !q.wmu.TryLock() {
		q.signal()
		return
	}
	if q.behind || len(q.out.rest) > 0 || q.out.err != nil {
		// The writer has bytes to finish first, or the peer has not kept
		// up since a flush last filled its socket: the writer waits for
		// it, and a copy of what the socket refused is saved.
		q.wmu.Unlock()
		q.signal()
		return
	}
	batch := q.take()
	if len(batch) == 0 {
		q.recycle(batch)
		q.wmu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(q.deadline) {
		// A write deadline that passed fails even a non-blocking write.
		q.deadline = now.Add(q.limits.WriteTimeout)
		_ = q.nc.SetWriteDeadline(q.deadline)
	}
	q.out.nonblock, q.out.wrote = true, false
	var err error
	var run inlineRun // frames encoded in place (Reserve), as write does
	at := hotpath.At(now)
	for i := range batch {
		if it := &batch[i]; it.m == nil && it.f == nil {
			err = q.addInline(q.w, &run, it, at)
		} else if err = q.flushRun(q.w, &run); err == nil {
			err = q.writeItem(q.w, it, at)
		}
		if err != nil {
			releaseFrames(batch[i+1:])
			break
		}
	}
	if err == nil {
		err = q.flushRun(q.w, &run)
	}
	if err == nil {
		err = q.w.Flush()
	}
	q.out.nonblock = false
	q.recycle(batch) // what the socket refused was copied (sink.rest)
	left := len(q.out.rest)
	q.behind = left > 0
	if q.out.wrote {
		q.lastWrite.Store(now.UnixNano())
	}
	q.mu.Lock() // under wmu: no batch of the writer's starts meanwhile
	q.writing = left
	if left == 0 && q.space != nil {
		close(q.space)
		q.space = nil
	}
	q.mu.Unlock()
	q.wmu.Unlock()
	if left > 0 || err != nil {
		q.signal() // the writer finishes the rest, or fails and closes
	}
}

// writeNow is the callback of tryWrite and writev: it writes s.try.p, or
// s.try.vec (writevNow), until the socket refuses more.
func (s *sink) writeNow(fd uintptr) bool {
	t := &s.try
	if t.vec != nil {
		return s.writevNow(fd)
	}
	for t.n < len(t.p) {
		m, e := writeFD(fd, t.p[t.n:])
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
		case e != nil:
			t.err = e
		default:
			t.n += m
			continue
		}
		break
	}
	return true // done: never wait for the socket to drain
}

// writevNow writes s.try.vec until the socket refuses more, advancing the
// slices past what each writev took; it reports whether the write is done
// (false: wait for the socket, and call again).
func (s *sink) writevNow(fd uintptr) bool {
	t := &s.try
	for len(t.vec) > 0 {
		m, err := s.sys.writev(int(fd), t.vec)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return !t.wait
		case err != nil:
			t.err = err
			return true
		}
		t.n += m
		if t.wait {
			s.progress.Store(time.Now().UnixNano())
		}
		for rest := m; rest > 0; t.vec = t.vec[1:] {
			l := len(t.vec[0])
			if rest < l { // part of this slice went: the rest of it is next
				t.vec[0] = t.vec[0][rest:]
				break
			}
			rest -= l
		}
	}
	return true
}
