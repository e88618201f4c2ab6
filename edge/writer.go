package edge

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Frame is one frame queued for a Writer: its bytes as they go on the
// wire, and its deadline (zero: none). A frame whose deadline has passed
// when the writer comes to it is dropped, never written; one that still
// has time left is first handed to WriterOptions.Stamp, so that the time
// it claims is what is left at that moment, not what was left when it
// was queued.
type Frame struct {
	Bytes    []byte
	Deadline time.Time
}

// WriterOptions configures a Writer.
type WriterOptions struct {
	// Queue bounds the frames waiting for the writer: Queue refuses the
	// one past it. It must be positive.
	Queue int
	// WriteTimeout bounds each write and flush to the connection: a peer
	// that takes no bytes for that long fails the writer. 0: no bound.
	WriteTimeout time.Duration
	// Stamp, when set, is called for each frame with a deadline just
	// before it is written, with the time left (always positive): it
	// rewrites the frame's own remaining-time field in place.
	Stamp func(frame []byte, left time.Duration)
	// Stopped, when set, is called once by the writer's goroutine as it
	// ends (not when Close comes before Start): with nil after Finish
	// wrote everything, ErrWriterClosed after Close, or the write error
	// that ended it. It may call Close; it must not call Wait.
	Stopped func(err error)
}

// ErrWriterClosed is what a Writer ended by Close reports to Stopped.
var ErrWriterClosed = errors.New("edge: writer closed")

// Writer is the one writer of a connection: a bounded queue of frames
// and one goroutine that writes them. The goroutine drains the queue
// without blocking, buffering what it takes (at most Queue frames a
// round), flushes once, then blocks for the next frame, so frames queued
// together go out in one write. What a Writer holds is its queue (Queue
// frames) and its buffer.
//
// Its owner makes it (NewWriter), may queue frames at once, starts the
// goroutine when the connection may carry them (Start), ends it (Close,
// or Finish to write what is queued first) and joins it (Wait). A frame
// in the buffer is stamped when it enters the buffer: behind a
// connection that takes nothing, at most one buffer of frames (4 KiB, or
// one frame larger than that) waits there with its stamp.
//
// Over a transport of messages (a WebSocket: NewMessageWriter) each
// frame is sent as one message as it comes, with the same queue, expiry
// and stamp.
type Writer struct {
	sink sink
	opts WriterOptions
	q    chan Frame

	stop, fin         chan struct{}
	stopOnce, finOnce sync.Once
	last              []byte // Finish's frame; written before fin is closed

	mu      sync.Mutex // guards started and closed
	started bool
	closed  bool
	done    chan struct{} // closed when the goroutine has ended, or by a Close before Start

	expired atomic.Uint64
}

// NewWriter returns a Writer for nc with opts; its goroutine starts with
// Start. The Writer never closes nc.
func NewWriter(nc net.Conn, opts WriterOptions) *Writer {
	return newWriter(&streamSink{nc: nc, timeout: opts.WriteTimeout}, opts)
}

// NewMessageWriter returns a Writer that hands each frame to send, one
// message each, in order, from its goroutine; send bounds its own write
// (WriterOptions.WriteTimeout is not used) and an error from it ends the
// writer.
func NewMessageWriter(send func(frame []byte) error, opts WriterOptions) *Writer {
	return newWriter(messageSink(send), opts)
}

func newWriter(s sink, opts WriterOptions) *Writer {
	if opts.Queue <= 0 {
		panic("edge: WriterOptions.Queue must be positive")
	}
	return &Writer{sink: s, opts: opts, q: make(chan Frame, opts.Queue),
		stop: make(chan struct{}), fin: make(chan struct{}), done: make(chan struct{})}
}

// sink is where a Writer's frames go: put takes one frame (after its
// expiry and stamp), flush ends a round.
type sink interface {
	put(frame []byte) error
	flush() error
}

// streamSink buffers frames for a byte stream and writes them once per
// round. A frame that does not fit in what the buffer has left goes after
// a flush, so that its stamp waits behind no earlier bytes. Owned by the
// writer's goroutine.
type streamSink struct {
	nc      net.Conn
	timeout time.Duration
	bw      *bufio.Writer // made at the first frame
}

func (s *streamSink) put(frame []byte) error {
	if s.bw == nil {
		s.bw = bufio.NewWriter(s.nc)
	}
	if s.bw.Buffered() > 0 && len(frame) > s.bw.Available() {
		if err := s.flush(); err != nil {
			return err
		}
	}
	s.deadline()
	_, err := s.bw.Write(frame)
	return err
}

func (s *streamSink) flush() error {
	if s.bw == nil || s.bw.Buffered() == 0 {
		return nil
	}
	s.deadline()
	return s.bw.Flush()
}

func (s *streamSink) deadline() {
	if s.timeout > 0 {
		_ = s.nc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
}

// messageSink sends each frame as one message.
type messageSink func(frame []byte) error

func (s messageSink) put(frame []byte) error { return s(frame) }
func (messageSink) flush() error             { return nil }

// Start starts the writer's goroutine, once; after Close it does
// nothing.
func (w *Writer) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.closed {
		return
	}
	w.started = true
	go w.run()
}

// Queue offers f to the writer without waiting: false when the queue
// holds Queue frames already, or the writer was closed.
func (w *Writer) Queue(f Frame) bool {
	select {
	case <-w.stop:
		return false
	default:
	}
	select {
	case w.q <- f:
		return true
	default:
		return false
	}
}

// Finish asks the writer to write what is queued (dropping what has
// expired), then last (nil: nothing more), flush, and end, reporting nil
// to Stopped. Only the first call counts; it may come before Start.
func (w *Writer) Finish(last []byte) {
	w.finOnce.Do(func() {
		w.last = last
		close(w.fin)
	})
}

// Close ends the writer without writing what is queued; it does not
// wait (Wait does). It may be called any number of times, from any
// goroutine, Stopped included.
func (w *Writer) Close() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && !w.started {
		close(w.done) // no goroutine to wait for
	}
	w.closed = true
}

// Wait returns once the goroutine has ended: after Start, once it was
// closed, finished, or failed; without Start, once Close was called.
func (w *Writer) Wait() { <-w.done }

// Expired returns how many frames were dropped because their deadline
// had passed when the writer came to them.
func (w *Writer) Expired() uint64 { return w.expired.Load() }

// Len returns how many frames wait in the queue.
func (w *Writer) Len() int { return len(w.q) }

func (w *Writer) run() {
	err := w.loop()
	if w.opts.Stopped != nil {
		w.opts.Stopped(err)
	}
	close(w.done)
}

func (w *Writer) loop() error {
	for {
		select {
		case f := <-w.q:
			if err := w.write(f); err != nil {
				return err
			}
			if err := w.drain(); err != nil {
				return err
			}
			if err := w.sink.flush(); err != nil {
				return err
			}
		case <-w.fin:
			if err := w.drain(); err != nil {
				return err
			}
			if len(w.last) > 0 {
				if err := w.write(Frame{Bytes: w.last}); err != nil {
					return err
				}
			}
			return w.sink.flush()
		case <-w.stop:
			return ErrWriterClosed
		}
	}
}

// drain writes what is queued now, at most Queue frames, without
// waiting for more.
func (w *Writer) drain() error {
	for range w.opts.Queue {
		select {
		case f := <-w.q:
			if err := w.write(f); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// write hands f to the sink, or drops it when its deadline has passed.
func (w *Writer) write(f Frame) error {
	if !f.Deadline.IsZero() {
		left := time.Until(f.Deadline)
		if left <= 0 {
			w.expired.Add(1)
			return nil
		}
		if w.opts.Stamp != nil {
			w.opts.Stamp(f.Bytes, left)
		}
	}
	return w.sink.put(f.Bytes)
}
