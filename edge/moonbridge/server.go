package moonbridge

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/edge"
)

// Defaults of Config.
const (
	// DefaultHandshakeTimeout bounds HELLO to REGISTERED (MoonBridge's
	// proxy and client both allow 5 s).
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultLease is how long a registered backend may stay silent: its
	// client sends a HEARTBEAT every 10 s by default, and gives up on a
	// PONG after 15 s.
	DefaultLease = 30 * time.Second
	// DefaultWriteTimeout bounds one write to a backend; a backend that
	// takes no bytes for that long is disconnected as a slow consumer.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultMaxConnections bounds the registered backends served at
	// once: a registration past it is refused (closed without a frame).
	// A connection that has not registered takes no place here; it holds
	// one in the shared admission (Config.Door's Hold) until it has.
	DefaultMaxConnections = 256
)

// Per-connection bounds: MaxInflight and MaxMessagesPerWindow are
// MoonBridge's own; MaxWriteQueue is busbar's (docs/moonbridge.md, "What
// differs").
const (
	// MaxInflight bounds the operations a backend has open through busbar
	// (MESSAGE frames not yet answered), and separately those busbar has
	// open towards it: past it a backend's MESSAGE is answered
	// BACKPRESSURED, and busbar's event BACKPRESSURED, request OVERLOAD.
	// (MoonBridge's LocalMessaging.MAX_IN_FLIGHT.)
	MaxInflight = 128
	// MaxWriteQueue bounds the frames queued for one backend. A message
	// that does not fit is refused as above; a response that does not fit
	// means the backend is not reading, and it is disconnected (as
	// MoonBridge's client does when it cannot queue a response).
	MaxWriteQueue = 256
	// MaxMessagesPerWindow bounds the MESSAGE frames one backend
	// connection may send per MessageWindow (Config.MessageWindow,
	// DefaultMessageWindow): the next one ends the connection, as
	// MoonBridge's proxy ends it (its Connection.allowMessage: 200 a
	// second). HEARTBEAT and RESPONSE frames are not counted.
	MaxMessagesPerWindow = 200
	// DefaultMessageWindow is the window MaxMessagesPerWindow counts in.
	DefaultMessageWindow = time.Second
)

// Keys finds a MoonBridge key: the principal it belongs to and its
// secret. *auth.Store implements it.
type Keys interface {
	MoonBridgeKey(keyID string) (p *auth.Principal, secret []byte, ok bool)
}

// Config configures a Server.
type Config struct {
	// Keys authenticates registrations (the broker's principals).
	Keys Keys
	// Dial connects to the broker as a principal, in process
	// (broker.(*Broker).DialInProcessAs).
	Dial func(p *auth.Principal) (net.Conn, error)
	// ProxyNode is the busbar node MoonBridge's Endpoint.proxy() is: the
	// broker's own name, or the node of --moonbridge-proxy. Required.
	ProxyNode string
	// AllowHosts, when not empty, lists the hosts a backend may advertise
	// in its game address (MoonBridge's allowedHosts); empty allows any.
	AllowHosts []string
	// Door is the shared door the server stands behind (busbar serve
	// gives broker.(*Broker).Door()): a connection holds a place in its
	// admission (Door.Hold) from accept until REGISTERED, or its close;
	// every refusal a peer can cause (a bad registration, over capacity,
	// a malformed frame, a failed handshake, a backend not reading) is
	// written through Door.Refusals, rate-limited. Its zero value is a
	// door of its own (edge.Door.Ready), except that without a Hold the
	// server admits at most MaxConnections connections before
	// REGISTERED at once, and closes one past that at once.
	Door edge.Door
	// Zero values take the defaults above.
	HandshakeTimeout time.Duration
	Lease            time.Duration
	WriteTimeout     time.Duration
	MaxConnections   int
	MessageWindow    time.Duration // DefaultMessageWindow
	// Logger is where the server logs what is not a refusal (backends
	// registered and gone); nil: Door.Log.
	Logger *slog.Logger
}

// Server serves MoonBridge backend connections. Each registered backend
// is a busbar node named by its backend name.
type Server struct {
	cfg        Config
	proxyEpoch UUID
	door       edge.Door
	log        *slog.Logger
	slots      chan struct{} // a place per registered backend, MaxConnections
	loggingIn  chan struct{} // without Door.Hold: a place per connection before REGISTERED, MaxConnections

	expiredGone atomic.Uint64 // Expired of the sessions that ended

	lns      edge.Listeners // the listeners Serve runs
	mu       sync.Mutex     // guards closed, sessions, conns; taken before wg.Add
	closed   bool
	conns    map[net.Conn]struct{} // every connection served, registered or not
	sessions map[string]*session   // registered backends by name
	held     map[string]heldName   // names of lost connections, held until their lease ends
	wg       sync.WaitGroup        // Serve loops, connections and their goroutines
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("moonbridge: server closed")

// New checks cfg and returns a Server. Its proxy epoch is fresh: it
// changes each time the broker starts.
func New(cfg Config) (*Server, error) {
	if cfg.Keys == nil || cfg.Dial == nil {
		return nil, errors.New("moonbridge: Config needs Keys and Dial")
	}
	if err := auth.ValidNodeName(cfg.ProxyNode); err != nil {
		return nil, fmt.Errorf("moonbridge: proxy node: %w", err)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MessageWindow <= 0 {
		cfg.MessageWindow = DefaultMessageWindow
	}
	door := cfg.Door
	if cfg.Logger != nil {
		door.Log = cfg.Logger
	}
	s := &Server{cfg: cfg, proxyEpoch: NewUUID(), slots: make(chan struct{}, cfg.MaxConnections),
		conns: map[net.Conn]struct{}{}, sessions: map[string]*session{}, held: map[string]heldName{}}
	if door.Hold == nil {
		s.loggingIn = make(chan struct{}, cfg.MaxConnections)
		door.Hold = s.holdOwn
	}
	s.door = door.Ready()
	s.log = s.door.Log
	return s, nil
}

// holdOwn is the admission of a server without a shared one: a place
// among MaxConnections for a connection before REGISTERED; none left,
// the connection is closed at once.
func (s *Server) holdOwn(nc net.Conn) (release func()) {
	select {
	case s.loggingIn <- struct{}{}:
	default:
		s.door.Refusals.Warn("moonbridge: connection refused: too many logging in", edge.SourceHost(nc.RemoteAddr()), "max_connections", s.cfg.MaxConnections)
		nc.Close()
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { <-s.loggingIn }) }
}

// ProxyEpoch is the epoch REGISTERED carries.
func (s *Server) ProxyEpoch() UUID { return s.proxyEpoch }

// Serve accepts backend connections on l until Close, then returns
// ErrServerClosed. It closes l. A temporary accept failure (out of file
// descriptors, and its like) is retried as edge.Accept retries it: it
// never stops the door.
func (s *Server) Serve(l net.Listener) error {
	if err := s.lns.Serve(l, doorName, s.log, s.accept); !errors.Is(err, edge.ErrDoorClosed) {
		return err
	}
	return ErrServerClosed
}

// accept serves nc in a goroutine of its own.
func (s *Server) accept(nc net.Conn) {
	if !s.track(nc) {
		nc.Close()
		return
	}
	go func() {
		defer s.wg.Done()
		defer s.untrack(nc)
		s.serveConn(nc)
	}()
}

func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[nc] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(nc net.Conn) {
	s.mu.Lock()
	delete(s.conns, nc)
	s.mu.Unlock()
}

// ServeConn serves one backend connection until it ends, as Serve does
// for each it accepts; it takes ownership of nc. After Close it returns
// ErrServerClosed at once.
func (s *Server) ServeConn(nc net.Conn) error {
	if !s.track(nc) {
		if nc != nil {
			nc.Close()
		}
		return ErrServerClosed
	}
	defer s.wg.Done()
	defer s.untrack(nc)
	s.serveConn(nc)
	return nil
}

// Close stops the listeners, says GOODBYE to every backend, closes every
// connection and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.lns.Wait()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.lns.Close()
	var live []*session
	registered := map[net.Conn]bool{}
	for _, ss := range s.sessions {
		live = append(live, ss)
		registered[ss.nc] = true
	}
	for nc := range s.conns {
		if !registered[nc] {
			nc.SetDeadline(time.Now()) // still logging in: refused
		}
	}
	s.mu.Unlock()
	for _, ss := range live {
		ss.goodbye()
	}
	s.lns.Wait() // no accept adds to wg after this
	s.wg.Wait()
	return nil
}

// serveConn runs one connection: the handshake, then the session. From
// accept until REGISTERED the connection holds a place in the shared
// admission (Door.Hold; when there is no room the hold closes nc, and
// the handshake fails at once); from a verified REGISTER until it ends,
// a registered backend holds one of MaxConnections.
func (s *Server) serveConn(nc net.Conn) {
	defer nc.Close()
	release := s.door.Hold(nc)
	defer release()
	reg, p, err := s.handshake(nc)
	if err != nil {
		return
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.door.Refusals.Warn("moonbridge: registration refused: at capacity", edge.SourceHost(nc.RemoteAddr()), "max_connections", s.cfg.MaxConnections,
			"backend", clip(reg.Name), "instance", clip(reg.InstanceID), "key_id", clip(reg.KeyID))
		return
	}
	ss, err := s.login(nc, reg, p, release)
	if err != nil {
		if !errors.Is(err, ErrServerClosed) { // the broker is stopping: not the peer's doing
			s.refused(nc, reg, err)
		}
		return
	}
	ss.run()
}

// handshake sends HELLO and reads and checks REGISTER. Each refusal is
// logged once; the connection is then closed without a frame, as
// MoonBridge's proxy refuses.
func (s *Server) handshake(nc net.Conn) (Register, *auth.Principal, error) {
	_ = nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	var nonce [NonceBytes]byte
	_, _ = rand.Read(nonce[:])
	if err := WriteFrame(nc, EncodeHello(Hello{Version: Version, Nonce: nonce})); err != nil {
		s.handshakeFailed(nc, err)
		return Register{}, nil, err
	}
	frame, err := ReadFrame(nc)
	if err != nil {
		s.handshakeFailed(nc, err)
		return Register{}, nil, err
	}
	reg, err := DecodeRegister(frame)
	if err != nil {
		// A peer of another protocol version sends another layout.
		err = fmt.Errorf("%w (or %v)", ErrVersion, err)
		s.refused(nc, reg, err)
		return reg, nil, err
	}
	p, err := s.verify(&reg, nonce)
	if err != nil {
		s.refused(nc, reg, err)
		return reg, nil, err
	}
	return reg, p, nil
}

// verify authenticates reg and checks what its principal may claim.
func (s *Server) verify(reg *Register, nonce [NonceBytes]byte) (*auth.Principal, error) {
	p, secret, ok := s.cfg.Keys.MoonBridgeKey(reg.KeyID)
	if !ok {
		return nil, ErrUnknownKey
	}
	if !Verify(secret, nonce, reg) {
		return nil, ErrBadSignature
	}
	if !p.MayClaim(reg.Name) || reg.Name == s.cfg.ProxyNode {
		return nil, fmt.Errorf("%w: principal %q may not be node %q (a backend name must be a busbar node name: 1..63 of [a-z0-9-])",
			ErrNameNotAllowed, p.Name, clip(reg.Name))
	}
	if err := s.checkAddress(reg.Address); err != nil {
		return nil, err
	}
	return p, nil
}

// checkAddress applies AllowHosts to a game address (a URI such as
// tcp://host:port).
func (s *Server) checkAddress(addr string) error {
	u, err := url.Parse(addr)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("%w: %q is not a URI with a host", ErrAddress, clip(addr))
	}
	if len(s.cfg.AllowHosts) > 0 && !slices.Contains(s.cfg.AllowHosts, u.Hostname()) {
		return fmt.Errorf("%w: host %q is not allowed", ErrAddress, clip(u.Hostname()))
	}
	return nil
}

// refused logs a refused registration, without the secret, through the
// refusal log.
func (s *Server) refused(nc net.Conn, reg Register, err error) {
	s.door.Refusals.Warn("moonbridge: registration refused", edge.SourceHost(nc.RemoteAddr()), "backend", clip(reg.Name),
		"instance", clip(reg.InstanceID), "key_id", clip(reg.KeyID), "reason", err.Error())
}

// handshakeFailed logs a connection that sent no REGISTER (it timed out,
// closed, or sent a frame past MaxFrameBytes) through the refusal log.
// One closed here (the server's Close, or the shared admission closing
// it for room) is not logged: whoever closed it said why.
func (s *Server) handshakeFailed(nc net.Conn, err error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed || errors.Is(err, net.ErrClosed) {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		edge.CountClosed(doorName, edge.ReasonLoginTimeout)
	}
	s.door.Refusals.Warn("moonbridge: handshake failed", edge.SourceHost(nc.RemoteAddr()), "err", err.Error())
}

// doorName is this door's name in the log and the metrics.
const doorName = "moonbridge"

// Expired returns how many MESSAGE frames for backends were dropped,
// never written, because their deadline passed before the writer came
// to them.
func (s *Server) Expired() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.expiredGone.Load()
	for _, ss := range s.sessions {
		n += ss.w.Expired()
	}
	return n
}

// heldName is a backend name whose connection was lost (not ended by
// GOODBYE): MoonBridge's proxy keeps its registration until its lease
// runs out, so that another instance cannot take the name meanwhile, and
// an old instance's late frames are never confused with a new one's.
type heldName struct {
	instance string
	until    time.Time // the lease's end: its last renewal + Lease
}

// claim makes ss the live session of its backend name: refused while
// another instance holds the name, live or within the lease of its lost
// connection; a reconnect of the same instance takes it over from its
// older connection, which is closed.
func (s *Server) claim(ss *session) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	old := s.sessions[ss.name]
	if old != nil && old.instance != ss.instance {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q is held by instance %q", ErrDuplicate, ss.name, clip(old.instance))
	}
	if h, ok := s.held[ss.name]; ok {
		if h.instance != ss.instance && time.Now().Before(h.until) {
			s.mu.Unlock()
			return fmt.Errorf("%w: %q is held by instance %q until its lease ends in %v (its connection was lost without GOODBYE)",
				ErrDuplicate, ss.name, clip(h.instance), time.Until(h.until).Round(time.Millisecond))
		}
		delete(s.held, ss.name)
	}
	s.sessions[ss.name] = ss
	s.mu.Unlock()
	if old != nil {
		old.close(errTakenOver)
	}
	return nil
}

func (s *Server) release(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.name] == ss {
		delete(s.sessions, ss.name)
		s.hold(ss)
	}
	s.expiredGone.Add(ss.w.Expired()) // once per session: its writer has ended
	edge.CountExpired(doorName, ss.w.Expired())
	s.mu.Unlock()
}

// hold keeps the name of ss, whose session ended, until its lease ends,
// unless it said GOODBYE or the server is closing; s.mu is held. Names
// whose lease has ended are forgotten here too.
func (s *Server) hold(ss *session) {
	now := time.Now()
	for name, h := range s.held {
		if !now.Before(h.until) {
			delete(s.held, name)
		}
	}
	ss.mu.Lock()
	why := ss.ended
	ss.mu.Unlock()
	renewed := ss.renewed.Load()
	if s.closed || renewed == 0 || errors.Is(why, errGoodbye) || errors.Is(why, ErrServerClosed) {
		return
	}
	if until := time.Unix(0, renewed).Add(s.cfg.Lease); now.Before(until) {
		s.held[ss.name] = heldName{instance: ss.instance, until: until}
	}
}

var errTakenOver = errors.New("moonbridge: the same instance registered again on a newer connection")
