package cosmix

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"busbar/client"
	"busbar/edge"
	"busbar/wire"
)

// session is one cosmix connection and the busbar node it is. ws is set
// once, before run; read-only after.
//
// Goroutines: the reader is ServeHTTP's (run); the writer (writeLoop), the
// watcher of the broker connection (watchNode) and one per call in either
// direction are joined by end through wg. Calls into the app run on the
// busbar client's executor and wait for the app on ctx.
type session struct {
	srv   *Server
	ws    *websocket.Conn
	bc    *client.Client
	scope *client.Scope
	// native: the connection came over the Unix socket, the verified
	// profile of cosmix-lib-client, which ends a connection that sends a
	// binary message; busbar ends it too.
	native bool
	// stamp is the connection's broker_principal, for what it sends to
	// other native connections (vouch.go); "" unless native.
	stamp   string
	vouched []string // its unredeemed vouchers, oldest first; under srv.vmu
	// door is the listener it came in on (DoorTCP, DoorUnix); host the
	// source host its refusals are logged under ("" for a local peer).
	door, host string

	ctx    context.Context // ends with the connection
	cancel context.CancelFunc
	w      *edge.Writer  // the connection's writer: encoded frames, one message each; OutboundQueue
	calls  chan struct{} // one per call made and not answered; MaxCalls
	wg     sync.WaitGroup

	mu      sync.Mutex // guards name, pending, nextID, subs
	name    string     // the registered service; "" while anonymous
	pending map[string]chan *wire.Message
	nextID  uint64
	subs    map[string]*client.Subscription // by topic

	dropped atomic.Uint64 // frames the full queue refused
}

func newSession(s *Server, bc *client.Client) *session {
	ctx, cancel := context.WithCancel(s.ctx)
	ss := &session{srv: s, bc: bc, scope: bc.Scope("cosmix"), ctx: ctx, cancel: cancel,
		calls:   make(chan struct{}, s.cfg.MaxCalls),
		pending: map[string]chan *wire.Message{}, subs: map[string]*client.Subscription{}}
	ss.w = edge.NewMessageWriter(ss.write, edge.WriterOptions{Queue: OutboundQueue, Stopped: func(error) { cancel() }})
	return ss
}

// write sends one frame to the app as one text message, from the
// connection's writer (started by run, once the connection is upgraded).
func (s *session) write(frame []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.srv.cfg.WriteTimeout)
	defer cancel()
	return s.ws.Write(ctx, websocket.MessageText, frame)
}

// setup makes the node take calls and events on CallChannel, before the
// connection is upgraded: a principal that may not is refused then.
func (s *session) setup() error {
	ch := s.scope.Channel(CallChannel)
	if _, err := ch.Handle(s.ctx, s.answerCall); err != nil {
		return err
	}
	_, err := ch.Subscribe(s.ctx, s.takeEvent)
	return err
}

// run serves the upgraded connection until it ends, then ends the session.
// Its first message must come within Config.FirstFrameTimeout: a
// connection that sends none is closed (RefusedNoFirstFrame), so an
// upgrade cannot hold a node and its goroutines for nothing.
func (s *session) run() {
	defer s.end()
	s.w.Start()
	s.wg.Go(s.watchNode)
	first, cancel := context.WithTimeout(s.ctx, s.srv.cfg.FirstFrameTimeout)
	defer cancel()
	ctx, waitingFirst := first, true
	for {
		typ, data, err := s.ws.Read(ctx) // a Read whose ctx ends closes the connection
		if err != nil {
			switch {
			case waitingFirst && errors.Is(first.Err(), context.DeadlineExceeded) && s.ctx.Err() == nil:
				edge.CountClosed("cosmix", edge.ReasonIdle)
				s.srv.refuse(s.door, RefusedNoFirstFrame, s.host, "node", s.bc.Node(), "first_frame_timeout", s.srv.cfg.FirstFrameTimeout)
			case errors.Is(err, websocket.ErrMessageTooBig):
				s.srv.refuse(s.door, RefusedTooBig, s.host, "node", s.bc.Node(), "max_message_bytes", MaxMessageBytes)
			}
			return
		}
		if waitingFirst {
			cancel()
			ctx, waitingFirst = s.ctx, false
		}
		if typ != websocket.MessageText {
			if s.native {
				s.srv.refuse(s.door, RefusedBinary, s.host, "node", s.bc.Node())
				_ = s.ws.Close(websocket.StatusUnsupportedData, "cosmix: text frames only")
				return
			}
			continue // noded reads text messages only
		}
		s.take(data)
	}
}

// end closes the connection and its node and joins the goroutines.
func (s *session) end() {
	s.cancel()
	s.w.Close()
	s.srv.withdraw(s)
	_ = s.bc.Close()
	s.wg.Wait()
	s.w.Wait()
	edge.CountExpired("cosmix", s.w.Expired())
	if s.ws != nil {
		_ = s.ws.CloseNow()
	}
}

// watchNode ends the session when its broker connection ends.
func (s *session) watchNode() {
	select {
	case <-s.bc.Done():
		s.cancel()
	case <-s.ctx.Done():
	}
}

// enqueue queues m for the writer, or drops it (counted) when the queue
// is full. Whatever m carries, it goes without a PrincipalHeader: busbar
// vouches for no sender that way.
func (s *session) enqueue(m *wire.Message) bool { return s.enqueueAs(m, "", time.Time{}) }

// enqueueAs is enqueue, stamping m with the sender's principal when there
// is one (a redeemed voucher's). A frame with a deadline (a call into the
// app, its caller's) is dropped, never written, once the deadline has
// passed while it waited (edge.Writer).
func (s *session) enqueueAs(m *wire.Message, stamp string, deadline time.Time) bool {
	stripStamped(m)
	if stamp != "" {
		m.Set(PrincipalHeader, stamp)
	}
	return s.enqueueFrame(Encode(m), deadline)
}

// take handles one text message from the app.
func (s *session) take(data []byte) {
	m, err := Decode(data)
	if err != nil {
		s.srv.refuse(s.door, RefusedMalformedFrame, s.host, "node", s.bc.Node(), "err", err)
		s.enqueue(invalidFrame(err))
		return
	}
	stripStamped(m) // an app's own claim travels nowhere
	if m.Value(wire.HeaderType) == wire.TypeResponse {
		s.answered(m)
		return
	}
	to := m.Value(wire.HeaderTo)
	if to == "" {
		to = noded
	}
	r := s.resolve(to)
	if r.local && r.node != "" && !s.knownNode(s.ctx, r.node) {
		r = route{err: unknownMeshNode(r.node)}
	}
	switch {
	case r.local:
		s.noded(m)
	case r.err != "":
		s.enqueue(response(m.Value(wire.HeaderID), wire.RCError, r.err))
	default:
		s.start(m, r)
	}
}

// answered hands the app's response to the call that waits for it; a
// response nobody waits for is dropped, as noded drops an orphan.
func (s *session) answered(m *wire.Message) {
	id := m.Value(wire.HeaderID)
	s.mu.Lock()
	ch, ok := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if ok {
		ch <- m // buffered, and taken from pending once
	}
}

// await opens a pending slot for a call into the app: its id and where
// the answer arrives. false when MaxCalls are waiting already.
func (s *session) await() (string, chan *wire.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= s.srv.cfg.MaxCalls {
		return "", nil, false
	}
	s.nextID++
	id := "noded-" + strconv.FormatUint(s.nextID, 10)
	ch := make(chan *wire.Message, 1)
	s.pending[id] = ch
	return id, ch, true
}

func (s *session) forget(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

func (s *session) serviceName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}
