package moonbridge

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"busbar/auth"
)

// session is one registered backend: its MoonBridge connection and its
// busbar node. Goroutines: run (the backend reader, the connection's own),
// writeLoop (the one writer to the backend) and the bus reader; close
// ends all three and run waits for them.
type session struct {
	s        *Server
	nc       net.Conn // the backend
	name     string   // backend name = busbar node name
	instance string
	address  string
	p        *auth.Principal
	bus      *busNode

	out chan []byte // frames for the backend, bounded by MaxWriteQueue

	mu     sync.Mutex // guards the fields below
	ended  error      // why the session ended; set once
	nextOp int64
	toBack map[int64]*inbound  // busbar's operations open towards the backend, by operation id
	fromBk map[string]*pending // the backend's operations open through busbar, by busbar id
	done   chan struct{}       // closed when the session ends

	bye     chan struct{} // closed by goodbye: the broker is stopping
	byeOnce sync.Once
	wg      sync.WaitGroup // writeLoop and the bus reader
}

// login dials the broker as the backend's principal, logs the node in,
// registers its subscription and handlers, and answers REGISTERED.
func (s *Server) login(nc net.Conn, reg Register, p *auth.Principal) (*session, error) {
	ss := &session{s: s, nc: nc, name: reg.Name, instance: reg.InstanceID, address: reg.Address, p: p,
		out: make(chan []byte, MaxWriteQueue), toBack: map[int64]*inbound{}, fromBk: map[string]*pending{}, done: make(chan struct{}), bye: make(chan struct{})}
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
	if err := WriteFrame(nc, frame); err != nil {
		ss.close(err)
		ss.wg.Wait()
		s.release(ss)
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	s.log.Info("moonbridge: backend registered", "backend", ss.name, "instance", clip(ss.instance), "address", clip(ss.address),
		"principal", p.Name, "epoch", epoch)
	ss.wg.Add(1)
	go func() { defer ss.wg.Done(); ss.writeLoop() }()
	return ss, nil
}

// run reads the backend's frames until the session ends, then waits for
// its goroutines.
func (ss *session) run() {
	defer ss.s.release(ss)
	defer ss.wg.Wait()
	r := bufio.NewReader(ss.nc)
	for {
		_ = ss.nc.SetReadDeadline(time.Now().Add(ss.s.cfg.Lease))
		frame, err := ReadFrame(r)
		if err != nil {
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
	if !ss.queue(frame) {
		return errSlow
	}
	return nil
}

// queue offers a frame to the writer without waiting.
func (ss *session) queue(frame []byte) bool {
	select {
	case <-ss.done:
		return false
	default:
	}
	select {
	case ss.out <- frame:
		return true
	default:
		return false
	}
}

// writeLoop writes queued frames, flushing when the queue is empty.
// When the broker stops (goodbye) it writes what is queued, then GOODBYE,
// and ends the session.
func (ss *session) writeLoop() {
	w := bufio.NewWriter(ss.nc)
	for {
		select {
		case frame := <-ss.out:
			if !ss.write(w, frame) || len(ss.out) == 0 && !ss.flush(w) {
				return
			}
		case <-ss.bye:
			for len(ss.out) > 0 {
				if !ss.write(w, <-ss.out) {
					return
				}
			}
			if ss.write(w, EncodeEmpty(TypeGoodbye)) && ss.flush(w) {
				ss.close(ErrServerClosed)
			}
			return
		case <-ss.done:
			return
		}
	}
}

func (ss *session) write(w *bufio.Writer, frame []byte) bool {
	_ = ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
	b, _ := AppendFrame(make([]byte, 0, 4+len(frame)), frame)
	if _, err := w.Write(b); err != nil {
		ss.close(err)
		return false
	}
	return true
}

func (ss *session) flush(w *bufio.Writer) bool {
	if err := w.Flush(); err != nil {
		ss.close(err)
		return false
	}
	return true
}

// goodbye ends the session as the broker stops: the writer sends what is
// queued and a GOODBYE (within the write timeout), then closes.
func (ss *session) goodbye() { ss.byeOnce.Do(func() { close(ss.bye) }) }

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
	ss.nc.Close()
	if ss.bus != nil {
		ss.bus.close()
	}
	if !errors.Is(why, errGoodbye) && !errors.Is(why, ErrServerClosed) {
		ss.s.log.Info("moonbridge: backend disconnected", "backend", ss.name, "reason", why.Error())
	}
}
