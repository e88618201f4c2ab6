package cosmix

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	// MaxConns, MaxCalls, CallTimeout, LoginTimeout and WriteTimeout are
	// limits (zero: DefaultMaxConns and so on).
	MaxConns, MaxCalls                      int
	CallTimeout, LoginTimeout, WriteTimeout time.Duration
	Logger                                  *slog.Logger
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
	unixLns  []*UnixListener

	dropped atomic.Uint64 // frames for apps their full queues refused
	refused atomic.Uint64 // Unix socket peers of another OS user

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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
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

// httpReadHeaderTimeout bounds an upgrade request's headers.
const httpReadHeaderTimeout = 5 * time.Second

// Serve answers cosmix clients on ln until Close.
func (s *Server) Serve(ln net.Listener) error { return s.serve(ln, nil) }

// serve answers cosmix clients on ln until Close; connCtx, when set, is
// the HTTP server's ConnContext.
func (s *Server) serve(ln net.Listener, connCtx func(context.Context, net.Conn) context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, s)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout, ConnContext: connCtx}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.hsrvs = append(s.hsrvs, hs)
	s.mu.Unlock()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
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
	if err := checkOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		http.Error(w, fmt.Sprintf("cosmix: %d connections already (the limit)", s.cfg.MaxConns), http.StatusServiceUnavailable)
		return
	}
	defer func() { <-s.slots }()
	if !s.add() {
		http.Error(w, ErrServerClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	peer, native := peerOf(r)
	cred, err := credential(r)
	var stamp string
	if native {
		cred, err = s.cfg.Owner, nil // the kernel vouched for the user: the owner
		if stamp, err = s.stampFor(peer); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="busbar"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	bc, err := s.login(r, cred)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, client.ErrAuth) {
			code = http.StatusUnauthorized
		}
		http.Error(w, "cosmix: cannot log in to the broker: "+err.Error(), code)
		return
	}
	sess := newSession(s, bc)
	sess.native, sess.stamp = native, stamp
	if err := sess.setup(); err != nil {
		sess.end()
		http.Error(w, "cosmix: the node may not take calls: "+err.Error(), http.StatusForbidden)
		return
	}
	// Origins are checked above, by busbar's rule.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		sess.end()
		return
	}
	ws.SetReadLimit(MaxMessageBytes)
	sess.ws = ws
	if !s.track(sess) {
		sess.end()
		return
	}
	if native {
		s.cfg.Logger.Debug("cosmix: native connection", "node", bc.Node(), "principal", cred.Principal, "uid", peer.UID, "pid", peer.PID)
	} else {
		s.cfg.Logger.Debug("cosmix: connection", "node", bc.Node(), "principal", cred.Principal, "remote", r.RemoteAddr)
	}
	sess.run()
	s.untrack(sess)
	s.cfg.Logger.Debug("cosmix: connection ended", "node", bc.Node(), "dropped", sess.dropped.Load())
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
		Logger:         s.cfg.Logger,
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
	if err == nil && u.Host != "" && loopbackHost(u.Host) && loopbackHost(r.Host) {
		return nil
	}
	return fmt.Errorf("cosmix: a page from %s may not connect", origin)
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
