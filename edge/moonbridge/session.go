package moonbridge

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/edge"
)

// session is one registered backend: its MoonBridge connection and its
// busbar node. Goroutines: run (the backend reader, the connection's own),
// the writer's (w, the one writer to the backend) and the bus reader;
// close ends all three and run waits for them.
type session struct {
	s        *Server
	nc       net.Conn // the backend
	name     string   // backend name = busbar node name
	instance string
	address  string
	p        *auth.Principal
	bus      *busNode

	// w writes the backend's frames, at most MaxWriteQueue queued; a
	// MESSAGE carries its deadline, and is dropped if that passes before
	// it is written (stampTimeout).
	w *edge.Writer

	mu     sync.Mutex // guards the fields below
	ended  error      // why the session ended; set once
	nextOp int64
	toBack map[int64]*inbound  // busbar's operations open towards the backend, by operation id
	fromBk map[string]*pending // the backend's operations open through busbar, by busbar id
	done   chan struct{}       // closed when the session ends

	wg sync.WaitGroup // the bus reader

	// renewed is when the backend's lease was last renewed (unix ns):
	// its registration, then each HEARTBEAT, as MoonBridge's proxy renews
	// it. A connection lost before GOODBYE keeps its name held until
	// renewed + Lease (Server.hold).
	renewed atomic.Int64
	// rate counts the backend's MESSAGE frames in the current window
	// (the session's reader alone touches it).
	rate messageRate
}

// messageRate is MoonBridge's limit on the MESSAGE frames one backend
// connection may send: at most MaxMessagesPerWindow in a window of
// MessageWindow, the window starting again at the first frame that
// comes a whole window after the one before it started.
type messageRate struct {
	start time.Time
	n     int
}

// allow counts a MESSAGE read at now; false past the limit.
func (r *messageRate) allow(now time.Time, window time.Duration) bool {
	if r.start.IsZero() || now.Sub(r.start) >= window {
		r.start, r.n = now, 0
	}
	r.n++
	return r.n <= MaxMessagesPerWindow
}

// errRate ends a session whose backend sent MESSAGE frames past the
// limit, as MoonBridge's proxy ends it.
var errRate = errors.New("moonbridge: backend message rate exceeded")

// login dials the broker as the backend's principal, logs the node in,
// registers its subscription and handlers, and answers REGISTERED,
// calling registered (which gives the connection's admission place
// back) just before: once the backend reads REGISTERED its place is
// free.
func (s *Server) login(nc net.Conn, reg Register, p *auth.Principal, registered func()) (*session, error) {
	ss := &session{s: s, nc: nc, name: reg.Name, instance: reg.InstanceID, address: reg.Address, p: p,
		toBack: map[int64]*inbound{}, fromBk: map[string]*pending{}, done: make(chan struct{})}
	ss.w = edge.NewWriter(nc, edge.WriterOptions{Queue: MaxWriteQueue, WriteTimeout: s.cfg.WriteTimeout,
		Stamp: stampTimeout, Stopped: ss.writerStopped})
	if err := s.claim(ss); err != nil {
		return nil, err
	}
	bus, epoch, err := dialBus(s.cfg.Dial, p, reg.Name, reg.Address, s.cfg.HandshakeTimeout)
	if err != nil {
		s.release(ss)
		return nil, errors.Join(ErrRegistration, err)
	}
	ss.bus = bus
	ss.wg.Add(1)
	go func() { defer ss.wg.Done(); ss.readBus() }()
	if err := ss.register(); err != nil {
		ss.close(err)
		ss.wg.Wait()
		s.release(ss)
		return nil, errors.Join(ErrRegistration, err)
	}
	frame, _ := EncodeRegistered(Registered{Epoch: int64(epoch &^ (1 << 63)), ProxyEpoch: s.proxyEpoch})
	registered()
	if err := WriteFrame(nc, frame); err != nil {
		ss.close(err)
		ss.wg.Wait()
		s.release(ss)
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	ss.renewed.Store(time.Now().UnixNano())
	s.log.Info("moonbridge: backend registered", "backend", ss.name, "instance", clip(ss.instance), "address", clip(ss.address),
		"principal", p.Name, "epoch", epoch)
	ss.w.Start()
	return ss, nil
}

// run reads the backend's frames until the session ends, then waits for
// its goroutines.
func (ss *session) run() {
	defer ss.s.release(ss)
	defer ss.w.Wait()
	defer ss.wg.Wait()
	r := bufio.NewReader(ss.nc)
	for {
		_ = ss.nc.SetReadDeadline(time.Now().Add(ss.s.cfg.Lease))
		frame, err := ReadFrame(r)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				edge.CountClosed(doorName, edge.ReasonIdle) // silent past its lease
			}
			ss.close(err)
			return
		}
		if err := ss.handle(frame); err != nil {
			ss.close(err)
			return
		}
	}
}

// errGoodbye ends a session whose backend said GOODBYE.
var errGoodbye = errors.New("moonbridge: backend said goodbye")

// handle acts on one frame from the backend; an error ends the session.
func (ss *session) handle(frame []byte) error {
	switch frame[0] {
	case TypeHeartbeat:
		if err := DecodeEmpty(frame, TypeHeartbeat); err != nil {
			return err
		}
		ss.renewed.Store(time.Now().UnixNano())
		return ss.queueResponse(EncodeEmpty(TypePong))
	case TypeGoodbye:
		if err := DecodeEmpty(frame, TypeGoodbye); err != nil {
			return err
		}
		return errGoodbye
	case TypeMessage:
		f, err := DecodeMessage(frame)
		if err != nil {
			return err
		}
		if !ss.rate.allow(time.Now(), ss.s.cfg.MessageWindow) {
			return fmt.Errorf("%w: more than %d MESSAGE frames within %v", errRate, MaxMessagesPerWindow, ss.s.cfg.MessageWindow)
		}
		ss.fromBackend(f)
		return nil
	case TypeResponse:
		p, err := DecodeResponse(frame)
		if err != nil {
			return err
		}
		ss.answerFromBackend(p)
		return nil
	}
	return malformed(frame[0], "not a frame a backend sends")
}

// errSlow ends a session whose backend does not read its responses.
var errSlow = errors.New("moonbridge: backend is not reading (its write queue is full)")

// queueResponse queues a frame the backend must get (a response, a
// PONG): when it does not fit the backend is not reading, and the
// session ends.
func (ss *session) queueResponse(frame []byte) error {
	if !ss.queue(frame, time.Time{}) {
		return errSlow
	}
	return nil
}

// queue offers a frame to the writer without waiting; a deadline that
// is not zero drops the frame if it passes before the frame is written.
func (ss *session) queue(frame []byte, deadline time.Time) bool {
	select {
	case <-ss.done:
		return false
	default:
	}
	b, err := AppendFrame(make([]byte, 0, 4+len(frame)), frame)
	if err != nil {
		return false
	}
	return ss.w.Queue(edge.Frame{Bytes: b, Deadline: deadline})
}

// timeoutAt is where a MESSAGE frame's timeout sits in its bytes on the
// wire: after the length prefix, the type byte and the operation id.
const timeoutAt = 4 + 1 + 8

// stampTimeout rewrites a queued MESSAGE's timeout as the time left when
// the writer writes it: whole milliseconds, at least MinTimeoutMillis
// (what is left below 1 ms is still sent as 1 ms, the protocol's least),
// at most MaxTimeoutMillis.
func stampTimeout(b []byte, left time.Duration) {
	if len(b) < timeoutAt+8 || b[4] != TypeMessage {
		return
	}
	ms := min(max(left.Milliseconds(), MinTimeoutMillis), MaxTimeoutMillis)
	binary.BigEndian.PutUint64(b[timeoutAt:], uint64(ms))
}

// writerStopped ends the session when its writer ends: after the
// GOODBYE goodbye asked for, as the broker stops, or on a failed write.
func (ss *session) writerStopped(err error) {
	if err == nil {
		err = ErrServerClosed
	}
	ss.close(err)
}

// goodbye ends the session as the broker stops: the writer sends what is
// queued (what has not expired) and a GOODBYE (within the write
// timeout), then the session closes.
func (ss *session) goodbye() {
	b, _ := AppendFrame(nil, EncodeEmpty(TypeGoodbye))
	ss.w.Finish(b)
}

// close ends the session once: both connections are closed and every
// open operation fails (busbar's callers are answered by the broker when
// the node leaves; the backend's get NOT_CONNECTED from its own client).
func (ss *session) close(why error) {
	ss.mu.Lock()
	if ss.ended != nil {
		ss.mu.Unlock()
		return
	}
	ss.ended = why
	close(ss.done)
	for _, p := range ss.fromBk {
		p.stop()
	}
	for _, in := range ss.toBack {
		in.stop()
	}
	clear(ss.fromBk)
	clear(ss.toBack)
	ss.mu.Unlock()
	ss.w.Close()
	ss.nc.Close()
	if ss.bus != nil {
		ss.bus.close()
	}
	switch {
	case errors.Is(why, errGoodbye), errors.Is(why, ErrServerClosed), errors.Is(why, edge.ErrWriterClosed):
	case errors.Is(why, ErrMalformed), errors.Is(why, ErrFrameSize):
		ss.s.door.Refusals.Warn("moonbridge: malformed frame", edge.SourceHost(ss.nc.RemoteAddr()), "backend", ss.name, "reason", why.Error())
	case errors.Is(why, errSlow):
		ss.s.door.Refusals.Warn("moonbridge: backend not reading", edge.SourceHost(ss.nc.RemoteAddr()), "backend", ss.name, "reason", why.Error())
	case errors.Is(why, errRate):
		ss.s.door.Refusals.Warn("moonbridge: message rate exceeded", edge.SourceHost(ss.nc.RemoteAddr()), "backend", ss.name, "reason", why.Error())
	default:
		ss.s.log.Info("moonbridge: backend disconnected", "backend", ss.name, "reason", why.Error())
	}
}
