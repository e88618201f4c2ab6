package cosmix

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/edge"
	"busbar/transport"
)

// Path is where a cosmix client connects: ws://HOST:PORT/ws, the path of
// cosmix-noded's listener.
const Path = "/ws"

// TokenParam is the query parameter that carries a connection's busbar
// credential, PRINCIPAL:SECRET: ws://127.0.0.1:PORT/ws?token=PRINCIPAL:SECRET.
// An "Authorization: Bearer PRINCIPAL:SECRET" header does the same.
const TokenParam = "token"

// Errors of the server.
var (
	// ErrServerClosed is what Serve returns once Close was called.
	ErrServerClosed = errors.New("cosmix: server closed")
	// ErrNotLoopback: Listen was given an address that is not on this
	// machine's loopback interface.
	ErrNotLoopback = errors.New("cosmix: the cosmix listener takes only a loopback address")
	// ErrNoToken: the upgrade request carried no credential.
	ErrNoToken = errors.New("cosmix: a connection needs ?token=PRINCIPAL:SECRET (or Authorization: Bearer PRINCIPAL:SECRET)")
)

// Config configures a Server.
type Config struct {
	// Dial makes the broker connection of each cosmix connection, on which
	// it logs in with its own credential: Dialer(broker). Required.
	Dial func(ctx context.Context) (net.Conn, error)
	// BrokerName and Version are the broker's node name and busbar's
	// version, for noded.info.
	BrokerName, Version string
	// NodePrefix starts the busbar node name of each connection; a random
	// suffix makes it unique (default "cosmix-"). The principal must be
	// allowed that name (its "nodes" patterns).
	NodePrefix string
	// Owner is the credential a connection on the Unix socket
	// (ListenUnix) logs in with: the broker owner's, whose OS user alone
	// may connect there. Unused by the loopback listener.
	Owner auth.Credential
	// MaxConns, MaxCalls, CallTimeout, LoginTimeout, WriteTimeout and
	// FirstFrameTimeout are limits (zero: DefaultMaxConns and so on).
	MaxConns, MaxCalls                                         int
	CallTimeout, LoginTimeout, WriteTimeout, FirstFrameTimeout time.Duration
	// Door is the process's shared door (broker.(*Broker).Door): the log,
	// the refusal log every refusal goes to, and the pre-login admission
	// each connection holds a place in from its accept to its upgrade (or
	// its close). Its zero value is a door of the server's own.
	Door edge.Door
}

// Server serves cosmix clients over WebSocket, each as a busbar node.
type Server struct {
	cfg     Config
	started time.Time
	slots   chan struct{} // one per connection served or logging in

	regMu  sync.Mutex // serialises noded.register's check and announce
	topics retained   // the topics' last frames

	mu       sync.Mutex // guards closed, sessions, hsrvs, endpoint
	closed   bool
	sessions map[*session]struct{}
	hsrvs    []*http.Server
	endpoint string // the Unix socket noded.ping advertises; "" for none
	bindHost string // the host of the first TCP listener served: noded.info's wg_ip
	unixLns  []*UnixListener

	dropped atomic.Uint64        // frames for apps their full queues refused
	refused edge.Counts[Refusal] // by door and reason

	epoch    string              // broker_epoch of the principals stamped
	vmu      sync.Mutex          // guards vouchers and each session's vouched
	vouchers map[string]*session // unredeemed vouchers, by token

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the sessions
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Dial == nil {
		return nil, errors.New("cosmix: Config.Dial is required")
	}
	if cfg.NodePrefix == "" {
		cfg.NodePrefix = "cosmix-"
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.LoginTimeout <= 0 {
		cfg.LoginTimeout = DefaultLoginTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.FirstFrameTimeout <= 0 {
		cfg.FirstFrameTimeout = DefaultFirstFrameTimeout
	}
	cfg.Door = cfg.Door.Ready()
	ctx, cancel := context.WithCancel(context.Background())
	var epoch [16]byte
	_, _ = rand.Read(epoch[:])
	return &Server{cfg: cfg, started: time.Now(), slots: make(chan struct{}, cfg.MaxConns),
		sessions: map[*session]struct{}{}, topics: retained{topics: map[string]*topicState{}}, ctx: ctx, cancel: cancel,
		epoch: hex.EncodeToString(epoch[:]), vouchers: map[string]*session{}}, nil
}

// Dropped is how many frames for cosmix apps were dropped because the
// app's queue (OutboundQueue) was full: replies, events and topic
// deliveries, and fire-and-forget messages past MaxCalls.
func (s *Server) Dropped() uint64 { return s.dropped.Load() }

// Listen listens on addr, which must be a loopback address (127.0.0.0/8,
// ::1 or localhost): cosmix-noded trusts its machine, busbar opens nothing
// to other machines.
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cosmix: %w", err)
	}
	if !strings.EqualFold(host, "localhost") {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("%w: %q", ErrNotLoopback, addr)
		}
	}
	return net.Listen("tcp", addr)
}

// Serve answers cosmix clients on ln until Close. The HTTP server is the
// edge's (edge.HTTPServer: its header size and timeouts), and each
// connection holds a place of Config.Door's admission from its accept to
// its upgrade, which only a request with a credential that logs in gets,
// or to its close.
func (s *Server) Serve(ln net.Listener) error {
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		s.mu.Lock()
		if s.bindHost == "" {
			s.bindHost = host
		}
		s.mu.Unlock()
	}
	return s.serve(ln, DoorTCP, nil)
}

// serve answers cosmix clients on ln, door, until Close; connCtx, when
// set, adds to each connection's context.
func (s *Server) serve(ln net.Listener, door string, connCtx func(context.Context, net.Conn) context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, s)
	hs, wrapped, _ := edge.HTTPServer(mux, ln, door, s.cfg.Door.Log, s.cfg.Door.Hold)
	if connCtx != nil {
		admit := hs.ConnContext
		hs.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
			if admit != nil {
				ctx = admit(ctx, nc)
			}
			return connCtx(ctx, nc)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = wrapped.Close()
		return ErrServerClosed
	}
	s.hsrvs = append(s.hsrvs, hs)
	s.mu.Unlock()
	if err := hs.Serve(wrapped); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ErrServerClosed
}

// Close stops Serve and ServeUnix, closes the Unix socket of ListenUnix
// (removing its file), closes every cosmix connection (their busbar nodes
// log out) and waits for them to end.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	hsrvs, unixLns := s.hsrvs, s.unixLns
	s.mu.Unlock()
	s.cancel()
	for _, hs := range hsrvs {
		_ = hs.Close()
	}
	for _, ln := range unixLns { // served or not, its file goes now
		_ = ln.Close()
	}
	s.wg.Wait()
	return nil
}

// ServeHTTP takes one cosmix connection: it checks the origin, logs a
// busbar node in with the request's credential (401 when it cannot), then
// upgrades and serves the connection until it ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	door, host := DoorTCP, sourceHost(r.RemoteAddr)
	peer, native := peerOf(r)
	if native {
		door, host = DoorUnix, "" // a local peer, as the broker logs one
	}
	if err := checkOrigin(r); err != nil {
		s.refuse(door, RefusedOrigin, host, "origin", oneLine(r.Header.Get("Origin")))
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.refuse(door, RefusedOverCapacity, host, "max_conns", s.cfg.MaxConns)
		http.Error(w, fmt.Sprintf("cosmix: %d connections already (the limit)", s.cfg.MaxConns), http.StatusServiceUnavailable)
		return
	}
	defer func() { <-s.slots }()
	if !s.add() {
		http.Error(w, ErrServerClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	cred, err := credential(r)
	var stamp string
	if native {
		cred, err = s.cfg.Owner, nil // the kernel vouched for the user: the owner
		if stamp, err = s.stampFor(peer); err != nil {
			s.refuse(door, RefusedForbidden, host, "err", err)
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	if err != nil {
		s.refuse(door, RefusedBadToken, host, "err", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="busbar"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	bc, err := s.login(r, cred)
	if err != nil {
		code, reason := http.StatusServiceUnavailable, RefusedLogin
		if errors.Is(err, client.ErrAuth) {
			code, reason = http.StatusUnauthorized, RefusedBadToken
		}
		s.refuse(door, reason, host, "principal", cred.Principal, "err", err)
		http.Error(w, "cosmix: cannot log in to the broker: "+err.Error(), code)
		return
	}
	sess := newSession(s, bc)
	sess.native, sess.stamp, sess.door, sess.host = native, stamp, door, host
	if err := sess.setup(); err != nil {
		sess.end()
		s.refuse(door, RefusedForbidden, host, "principal", cred.Principal, "err", err)
		http.Error(w, "cosmix: the node may not take calls: "+err.Error(), http.StatusForbidden)
		return
	}
	// Origins are checked above, by busbar's rule. The upgrade hijacks the
	// connection, which gives its admission place back (edge.HTTPServer).
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		sess.end()
		s.refuse(door, RefusedBadUpgrade, host, "err", err)
		return
	}
	ws.SetReadLimit(MaxMessageBytes)
	sess.ws = ws
	if !s.track(sess) {
		sess.end()
		return
	}
	log := s.cfg.Door.Log
	if native {
		log.Debug("cosmix: native connection", "node", bc.Node(), "principal", cred.Principal, "uid", peer.UID, "pid", peer.PID)
	} else {
		log.Debug("cosmix: connection", "node", bc.Node(), "principal", cred.Principal, "remote", r.RemoteAddr)
	}
	sess.run()
	s.untrack(sess)
	log.Debug("cosmix: connection ended", "node", bc.Node(), "dropped", sess.dropped.Load())
}

// Dialer is Config.Dial for a broker in this process: a pipe the broker
// serves as it serves a socket (Broker.ServeConn), so each cosmix node
// logs in with its own credential and has its principal's permissions,
// never the trusted node of Broker.DialInProcess.
func Dialer(b *broker.Broker) func(context.Context) (net.Conn, error) {
	return func(context.Context) (net.Conn, error) {
		cl, srv, err := transport.Pipe()
		if err != nil {
			return nil, err
		}
		go b.ServeConn(srv) // the broker's: it ends at the broker's shutdown
		return cl, nil
	}
}

// add counts a connection in s.wg unless the server is closed.
func (s *Server) add() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Server) track(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.sessions[sess] = struct{}{}
	return true
}

func (s *Server) untrack(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
}

// login connects a busbar node for one cosmix connection, in process.
func (s *Server) login(r *http.Request, cred auth.Credential) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.LoginTimeout)
	defer cancel()
	stop := context.AfterFunc(r.Context(), cancel)
	defer stop()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return client.Connect(ctx, client.Options{
		Dial:           s.cfg.Dial,
		Node:           s.cfg.NodePrefix + hex.EncodeToString(b[:]),
		Credential:     cred,
		MaxReconnects:  client.NoReconnect,
		DefaultTimeout: s.cfg.CallTimeout,
		Logger:         s.cfg.Door.Log,
	})
}

// credential reads PRINCIPAL:SECRET from the Authorization header or the
// token parameter.
func credential(r *http.Request) (auth.Credential, error) {
	tok := r.URL.Query().Get(TokenParam)
	if scheme, v, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "Bearer") {
		tok = strings.TrimSpace(v)
	}
	principal, secret, ok := strings.Cut(tok, ":")
	if !ok || principal == "" || secret == "" {
		return auth.Credential{}, ErrNoToken
	}
	return auth.Credential{Principal: principal, Secret: secret}, nil
}

// checkOrigin refuses a browser page that is not a loopback one: a cosmix
// client sends no Origin, and a web page elsewhere must not reach the bus
// through a local user's token.
func checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err == nil && u.Host != "" && transport.IsLoopbackHost(u.Host) && transport.IsLoopbackHost(r.Host) {
		return nil
	}
	return fmt.Errorf("cosmix: a page from %s may not connect", origin)
}
