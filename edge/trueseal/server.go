package trueseal

import (
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"busbar/relay"
)

// The server's limits and timings. Each is an Options field; 0 there is
// the default here.
const (
	// DefaultHeartbeatInterval: a receive session on which nothing was
	// written for this long gets a Heartbeat (NAT and firewall tables
	// forget idle TCP connections, trueseal-relay ADR-0006).
	DefaultHeartbeatInterval = 30 * time.Second
	// DefaultIdleTimeout: a session from which nothing was read for this
	// long is closed (three heartbeats unanswered: the peer is gone).
	DefaultIdleTimeout = 3 * DefaultHeartbeatInterval
	// DefaultHandshakeTimeout bounds the Noise handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxSessions bounds the sessions open at once, push and
	// receive together; a connection past it is closed at once.
	DefaultMaxSessions = 10_000
	// DefaultMaxPushesInFlight bounds a push session's pushes admitted
	// and not yet answered; past it the session stops reading until an
	// answer goes out (backpressure, nothing dropped).
	DefaultMaxPushesInFlight = 256
	// DeliverQueue is how many Deliver frames a receive session holds
	// ready for its writer.
	DeliverQueue = 16
)

// Protocol names trueseal's inboxes to the broker (its edge protocol's
// label, broker.EdgeInboxes): a trueseal push forwarded between brokers
// reaches only a trueseal inbox.
const Protocol = "trueseal"

// DevicePrefix starts the relay-store device id of every trueseal inbox:
// "trueseal." and the inbox's static key in unpadded base64url (52
// bytes in all, within relay.MaxDeviceBytes).
const DevicePrefix = Protocol + "."

// DeviceID is the relay-store device id of the inbox whose address (the
// device's static key) is key.
func DeviceID(key []byte) string {
	return DevicePrefix + base64.RawURLEncoding.EncodeToString(key)
}

// Errors of the server.
var (
	ErrNoStore   = errors.New("trueseal: Options.Store and Options.Inboxes are nil")
	ErrBadKey    = errors.New("trueseal: the relay's static key is not an X25519 key pair")
	ErrClosed    = errors.New("trueseal: server closed")
	ErrHandshake = errors.New("trueseal: handshake failed")
)

// Options configure a Server.
type Options struct {
	Key noise.DHKey // the relay's static key pair (LoadOrCreateKey)
	// Store is the local relay store: the inboxes live in it unless
	// Inboxes is set, and /metrics counts its trueseal inboxes. The
	// server does not close it.
	Store *relay.Store
	// Inboxes, if set, is where the inboxes are kept (BusInboxes: on a
	// bus, each on its home broker).
	Inboxes Inboxes

	HeartbeatInterval time.Duration
	IdleTimeout       time.Duration
	HandshakeTimeout  time.Duration
	MaxSessions       int
	MaxPushesInFlight int
}

// The server logs nothing: what it could say of a session (a key, an
// address, a failed decryption) would tell who talks to whom. Stats and
// the Collector count what happens.

// Stats are the server's counts, for /metrics.
type Stats struct {
	Sessions                      int    // connections held now, handshakes included (MaxSessions bounds it)
	PushSessions, ReceiveSessions int64  // open now
	Pushed, Refused, Delivered    uint64 // pushes acked, pushes answered Error or dropped, blobs delivered
	DeliverAcks, HandshakeFailed  uint64
	SessionsRefused               uint64 // past MaxSessions
}

// Server is a trueseal relay over busbar's relay store: Noise NK push
// sessions and Noise XX receive sessions on one listener.
type Server struct {
	opts    Options
	inboxes Inboxes
	// pushAsync, if set, replaces the sessions' pushers: tests hold
	// callbacks back with their own.
	pushAsync func(device string, blob []byte, then func(relay.Seq, error)) error

	mu      sync.Mutex
	closed  bool                      // guarded by mu
	lns     map[net.Listener]struct{} // guarded by mu
	conns   map[net.Conn]struct{}     // guarded by mu
	wg      sync.WaitGroup            // every Serve loop and every session
	quit    chan struct{}             // closed by Close
	ctx     context.Context           // ends with Close
	stop    context.CancelFunc
	pushN   atomic.Int64
	recvN   atomic.Int64
	pushed  atomic.Uint64
	refused atomic.Uint64
	deliv   atomic.Uint64
	dacks   atomic.Uint64
	hsFail  atomic.Uint64
	full    atomic.Uint64
}

// NewServer checks opts and returns a server serving nothing yet.
func NewServer(opts Options) (*Server, error) {
	inboxes := opts.Inboxes
	if inboxes == nil && opts.Store != nil {
		inboxes = storeInboxes{opts.Store}
	}
	if inboxes == nil {
		return nil, ErrNoStore
	}
	if !validKeyPair(opts.Key) {
		return nil, ErrBadKey
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&opts.IdleTimeout, 3*opts.HeartbeatInterval)
	def(&opts.HandshakeTimeout, DefaultHandshakeTimeout)
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxPushesInFlight <= 0 {
		opts.MaxPushesInFlight = DefaultMaxPushesInFlight
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Server{opts: opts, inboxes: inboxes, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}, quit: make(chan struct{}), ctx: ctx, stop: stop}, nil
}

func validKeyPair(k noise.DHKey) bool {
	if len(k.Private) != KeyBytes || len(k.Public) != KeyBytes {
		return false
	}
	priv, err := ecdh.X25519().NewPrivateKey(k.Private)
	return err == nil && string(priv.PublicKey().Bytes()) == string(k.Public)
}

// PublicKey is the relay's static public key, the one its clients are
// configured with.
func (s *Server) PublicKey() []byte { return append([]byte(nil), s.opts.Key.Public...) }

// Stats returns the server's counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return Stats{
		Sessions:     n,
		PushSessions: s.pushN.Load(), ReceiveSessions: s.recvN.Load(),
		Pushed: s.pushed.Load(), Refused: s.refused.Load(), Delivered: s.deliv.Load(),
		DeliverAcks: s.dacks.Load(), HandshakeFailed: s.hsFail.Load(), SessionsRefused: s.full.Load(),
	}
}

// Serve accepts connections on ln until Close (then it returns ErrClosed)
// or until ln fails. Close closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.lns[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.quit:
				return ErrClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !s.track(c) {
			c.Close()
			continue
		}
		go s.served(c)
	}
}

// ServeConn serves one connection, from any transport (a TCP connection
// Serve accepted elsewhere, a net.Pipe), until its session ends. Past
// MaxSessions, or once Close has begun, c is closed at once.
func (s *Server) ServeConn(c net.Conn) {
	if !s.track(c) {
		c.Close()
		return
	}
	s.served(c)
}

// served runs a tracked connection and untracks it.
func (s *Server) served(c net.Conn) {
	defer s.wg.Done()
	defer s.untrack(c)
	s.serveConn(c)
}

// track registers c as a session (wg counted), or refuses it: closed
// server, or MaxSessions reached.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if len(s.conns) >= s.opts.MaxSessions {
		s.full.Add(1)
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops the listeners, ends every session and waits for their
// goroutines. Pushes admitted to the store and not yet answered stay in
// the store's hands: their clients, never acked, push them again.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.quit)
	s.stop()
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// serveConn runs one connection: the handshake, then its session.
func (s *Server) serveConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	first, err := readMessage(c, nil)
	if err != nil {
		s.hsFail.Add(1)
		return
	}
	// NK's first message is e, es and an encrypted empty payload: 48
	// bytes that only the relay's static key opens. Anything it does not
	// open is taken as XX's first message (e alone, in clear).
	if cs, ok := s.acceptNK(c, first); ok {
		s.pushSession(c, cs)
		return
	}
	if cs, peer, ok := s.acceptXX(c, first); ok {
		s.receiveSession(c, cs, peer)
		return
	}
	s.hsFail.Add(1)
}

// ciphers are a session's two directions after the handshake.
type ciphers struct{ recv, send *noise.CipherState }

func (s *Server) acceptNK(c net.Conn, first []byte) (ciphers, bool) {
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Pattern: noise.HandshakeNK, StaticKeypair: s.opts.Key})
	if err != nil {
		return ciphers{}, false
	}
	if _, _, _, err := hs.ReadMessage(nil, first); err != nil {
		return ciphers{}, false
	}
	msg, toRelay, toClient, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return ciphers{}, false
	}
	if _, err := c.Write(appendMessage(nil, msg)); err != nil {
		return ciphers{}, false
	}
	return ciphers{recv: toRelay, send: toClient}, true
}

func (s *Server) acceptXX(c net.Conn, first []byte) (ciphers, []byte, bool) {
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Pattern: noise.HandshakeXX, StaticKeypair: s.opts.Key})
	if err != nil {
		return ciphers{}, nil, false
	}
	if _, _, _, err := hs.ReadMessage(nil, first); err != nil {
		return ciphers{}, nil, false
	}
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return ciphers{}, nil, false
	}
	if _, err := c.Write(appendMessage(nil, msg)); err != nil {
		return ciphers{}, nil, false
	}
	third, err := readMessage(c, nil)
	if err != nil {
		return ciphers{}, nil, false
	}
	_, toRelay, toDevice, err := hs.ReadMessage(nil, third)
	if err != nil || toRelay == nil {
		return ciphers{}, nil, false
	}
	return ciphers{recv: toRelay, send: toDevice}, append([]byte(nil), hs.PeerStatic()...), true
}
