package trueseal

import (
	"container/list"
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"busbar/edge"
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
	// DefaultHandshakeTimeout bounds the Noise handshake. Until it is
	// done a connection also holds a place in the shared pre-login
	// admission (Options.Door.Hold), whose rules bound and evict the
	// connections still in their handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultFirstFrameTimeout: a session whose handshake is done but
	// from which no frame came within this long (a push session that
	// pushed nothing; a receive session whose device answered nothing,
	// not even the Heartbeat the relay sends it at half this time) is
	// closed, counted as "unused". Such a session is also the first to
	// make room for a new one at MaxSessions.
	DefaultFirstFrameTimeout = 10 * time.Second
	// DefaultMaxSessions bounds the sessions open at once, push and
	// receive together, counted from the end of their handshake. At it,
	// a new session takes the place of the oldest one that has pushed and
	// received nothing yet (closed, counted as "evicted"); when every
	// session has, the new one is closed at once (SessionsRefused).
	DefaultMaxSessions = 10_000
	// DefaultMaxPushesInFlight bounds a push session's pushes admitted
	// and not yet answered; past it the session stops reading until an
	// answer goes out (backpressure, nothing dropped).
	DefaultMaxPushesInFlight = 256
	// DefaultSourcePushRate and DefaultSourcePushBurst are the token
	// bucket of one source address (an IPv4 address, an IPv6 /64): the
	// pushes a second, sustained, that its push sessions may make
	// together, and how many at once. A push over it is refused for now
	// (RateLimited: the session closes unacked and the client pushes it
	// again later). trueseal's pushers are anonymous: this, and the store's
	// edge budget (relay.Options.Edge), are what bound them.
	DefaultSourcePushRate  = 20
	DefaultSourcePushBurst = 200
	// MaxPushSources bounds the source addresses with a bucket of their
	// own; past it (after forgetting the full buckets, at most once a
	// second) every further address shares one bucket, so a flood from
	// many addresses costs no more memory and gets no more pushes.
	MaxPushSources = 16_384
	// DefaultMaxReceivePerSource is one source address's share of the
	// receive sessions open at once (an IPv4 address, an IPv6 /64, as for
	// SourcePushRate): past it, a receive session from that address is
	// closed at the end of its handshake (SourceSessionsRefused). A
	// receive session proves only that its peer holds some key, which
	// costs nothing to make, and one that answers heartbeats is never
	// closed for being unused: without a share, one address could hold
	// every place of MaxSessions. A tenth of DefaultMaxSessions, so a
	// carrier's NAT may put a thousand devices behind one address; the
	// shared login pool bounds connections still in their handshake the
	// same way (broker.DefaultMaxHandshakesPerAddr).
	DefaultMaxReceivePerSource = DefaultMaxSessions / 10
	// DeliverQueue is how many Deliver frames a receive session holds
	// ready for its writer.
	DeliverQueue = 16
)

// DoorName names the trueseal listener in the edge's accept log and
// counts (edge.AcceptFailures).
const DoorName = "trueseal"

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
	// Door is the process's shared door (broker.(*Broker).Door): its
	// Hold admits a connection from accept until its handshake is done,
	// its Refusals log every refusal a peer can cause, its Log the rest.
	// The zero Door is one of the server's own, admitting every
	// connection (then only HandshakeTimeout bounds those in their
	// handshake).
	Door edge.Door

	HeartbeatInterval time.Duration
	IdleTimeout       time.Duration
	HandshakeTimeout  time.Duration
	FirstFrameTimeout time.Duration
	MaxSessions       int
	MaxPushesInFlight int
	// MaxReceivePerSource: 0 is DefaultMaxReceivePerSource; negative,
	// no share (MaxSessions alone bounds them).
	MaxReceivePerSource int
	// SourcePushRate and SourcePushBurst: 0 is the default; a negative
	// SourcePushRate turns the bucket per source address off.
	SourcePushRate  float64
	SourcePushBurst int
}

// What the server logs: refusals only (a failed handshake, a session
// refused or closed to make room or for saying nothing, a push refused),
// through Door.Refusals, with the source address and the reason, never
// a key, an inbox or a byte of a blob: who talks to whom stays unsaid.
// Stats and the Collector count everything.

// Stats are the server's counts, for /metrics.
type Stats struct {
	Accepted                      uint64 // connections accepted (or given to ServeConn)
	Handshakes                    int    // connections in their handshake now (Door.Hold bounds them)
	Sessions                      int    // sessions open now, handshake done (MaxSessions bounds it)
	PushSessions, ReceiveSessions int64  // open now
	Pushed, Refused, Delivered    uint64 // pushes acked, pushes answered Error or dropped, blobs delivered
	SourceRateLimited             uint64 // pushes refused for their source address's SourcePushRate (in Refused too)
	DeliverAcks, HandshakeFailed  uint64
	SessionsRefused               uint64 // past MaxSessions, every session in use
	SourceSessionsRefused         uint64 // receive sessions past their source address's MaxReceivePerSource
	// Sessions closed by the server, by reason: nothing read within
	// FirstFrameTimeout of the handshake (Unused), closed to make room at
	// MaxSessions (Evicted), nothing read for IdleTimeout (Idle).
	Unused, Evicted, Idle uint64
}

// Server is a trueseal relay over busbar's relay store: Noise NK push
// sessions and Noise XX receive sessions on one listener.
type Server struct {
	opts    Options
	door    edge.Door
	inboxes Inboxes
	sources *sourceLimiter
	// pushAsync, if set, replaces the sessions' pushers: tests hold
	// callbacks back with their own.
	pushAsync func(device string, blob []byte, then func(relay.Seq, error)) error

	mu       sync.Mutex
	closed   bool                  // guarded by mu
	lns      edge.Listeners        // the listeners Serve runs
	conns    map[net.Conn]struct{} // guarded by mu
	sessions int                   // guarded by mu: handshakes done, sessions not ended
	unused   list.List             // guarded by mu: of *session, those not used yet, oldest first
	recvSrc  map[string]int        // guarded by mu: receive sessions open, by source (sourceKey)
	wg       sync.WaitGroup        // every Serve loop and every session
	quit     chan struct{}         // closed by Close
	ctx      context.Context       // ends with Close
	stop     context.CancelFunc
	accepted atomic.Uint64
	hsN      atomic.Int64
	pushN    atomic.Int64
	recvN    atomic.Int64
	pushed   atomic.Uint64
	refused  atomic.Uint64
	srcRate  atomic.Uint64
	deliv    atomic.Uint64
	dacks    atomic.Uint64
	hsFail   atomic.Uint64
	full     atomic.Uint64
	srcFull  atomic.Uint64
	unusedN  atomic.Uint64
	evicted  atomic.Uint64
	idle     atomic.Uint64
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
	def(&opts.FirstFrameTimeout, DefaultFirstFrameTimeout)
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxPushesInFlight <= 0 {
		opts.MaxPushesInFlight = DefaultMaxPushesInFlight
	}
	if opts.MaxReceivePerSource == 0 {
		opts.MaxReceivePerSource = DefaultMaxReceivePerSource
	}
	if opts.SourcePushRate == 0 {
		opts.SourcePushRate = DefaultSourcePushRate
	}
	if opts.SourcePushBurst <= 0 {
		opts.SourcePushBurst = DefaultSourcePushBurst
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Server{opts: opts, door: opts.Door.Ready(), inboxes: inboxes,
		sources: newSourceLimiter(opts.SourcePushRate, opts.SourcePushBurst),
		conns:   map[net.Conn]struct{}{}, recvSrc: map[string]int{},
		quit: make(chan struct{}), ctx: ctx, stop: stop}, nil
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
	n := s.sessions
	s.mu.Unlock()
	return Stats{
		Accepted: s.accepted.Load(), Handshakes: int(s.hsN.Load()), Sessions: n,
		PushSessions: s.pushN.Load(), ReceiveSessions: s.recvN.Load(),
		Pushed: s.pushed.Load(), Refused: s.refused.Load(), Delivered: s.deliv.Load(),
		SourceRateLimited: s.srcRate.Load(),
		DeliverAcks:       s.dacks.Load(), HandshakeFailed: s.hsFail.Load(), SessionsRefused: s.full.Load(),
		SourceSessionsRefused: s.srcFull.Load(),
		Unused:                s.unusedN.Load(), Evicted: s.evicted.Load(), Idle: s.idle.Load(),
	}
}

// Serve accepts connections on ln until Close (then it returns ErrClosed)
// or until ln fails for good: the edge's accept loop (edge.Accept), which
// retries a temporary failure (out of descriptors, say) after a growing
// pause. Close closes ln.
func (s *Server) Serve(ln net.Listener) error {
	err := s.lns.Serve(ln, DoorName, s.door.Log, func(c net.Conn) {
		if !s.track(c) {
			c.Close()
			return
		}
		go s.served(c)
	})
	if errors.Is(err, edge.ErrDoorClosed) {
		return ErrClosed
	}
	return err
}

// ServeConn serves one connection, from any transport (a TCP connection
// Serve accepted elsewhere, a net.Pipe), until its session ends. Once
// Close has begun, c is closed at once.
func (s *Server) ServeConn(c net.Conn) {
	if !s.track(c) {
		c.Close()
		return
	}
	s.served(c)
}

// served runs a tracked connection and untracks it. From here until its
// handshake is done, it holds a place in the door's admission.
func (s *Server) served(c net.Conn) {
	defer s.wg.Done()
	defer s.untrack(c)
	s.accepted.Add(1)
	release := s.door.Hold(c) // no room: c is closed, and the handshake's read fails
	defer release()
	s.serveConn(c, release)
}

// track registers c for Close (wg counted), or refuses it: closed server.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
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
		s.lns.Wait()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.quit)
	s.stop()
	s.lns.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.lns.Wait() // no accept tracks a connection after this
	s.wg.Wait()
	return nil
}

// session is one connection past its handshake, counted against
// MaxSessions until it ends.
type session struct {
	c    net.Conn
	host string    // the peer's address, for the refusal log
	src  string    // a receive session's source (sourceKey(host))
	recv bool      // a receive session: counted in Server.recvSrc
	by   time.Time // its first frame must come before this (FirstFrameTimeout)
	used atomic.Bool
	open bool          // guarded by Server.mu: counted in Server.sessions
	elem *list.Element // guarded by Server.mu: in Server.unused while not used
}

// admit counts a connection whose handshake is done as a session (a
// receive session if receive). A receive session past its source
// address's MaxReceivePerSource is refused: nil. At MaxSessions the
// oldest session not used yet is closed to make room; when every one is
// used, nil: the connection is refused (and closed by its caller).
func (s *Server) admit(c net.Conn, host string, receive bool) *session {
	var src string
	if receive {
		src = sourceKey(host)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if receive && s.opts.MaxReceivePerSource > 0 && s.recvSrc[src] >= s.opts.MaxReceivePerSource {
		s.mu.Unlock()
		s.srcFull.Add(1)
		s.door.Refusals.Warn("trueseal receive session refused: its source address holds its share of receive sessions", host,
			"max_receive_per_source", s.opts.MaxReceivePerSource)
		return nil
	}
	var victim *session
	if s.sessions >= s.opts.MaxSessions {
		e := s.unused.Front()
		if e == nil {
			s.mu.Unlock()
			s.full.Add(1)
			s.door.Refusals.Warn("trueseal session refused: MaxSessions reached, every session in use", host,
				"max_sessions", s.opts.MaxSessions)
			return nil
		}
		victim = e.Value.(*session)
		s.leaveLocked(victim)
	}
	ss := &session{c: c, host: host, src: src, recv: receive, by: time.Now().Add(s.opts.FirstFrameTimeout), open: true}
	ss.elem = s.unused.PushBack(ss)
	s.sessions++
	if receive {
		s.recvSrc[src]++
	}
	s.mu.Unlock()
	if victim != nil {
		s.evicted.Add(1)
		s.door.Refusals.Warn("trueseal session closed to make room: it had pushed and received nothing", victim.host,
			"max_sessions", s.opts.MaxSessions)
		victim.c.Close()
	}
	return ss
}

// markUsed notes that ss pushed or received: it is no longer the first to
// make room, nor closed at FirstFrameTimeout.
func (s *Server) markUsed(ss *session) {
	if ss.used.Load() {
		return
	}
	ss.used.Store(true)
	s.mu.Lock()
	if ss.elem != nil {
		s.unused.Remove(ss.elem)
		ss.elem = nil
	}
	s.mu.Unlock()
}

// end stops counting ss.
func (s *Server) end(ss *session) {
	s.mu.Lock()
	s.leaveLocked(ss)
	s.mu.Unlock()
}

func (s *Server) leaveLocked(ss *session) {
	if !ss.open {
		return
	}
	ss.open = false
	s.sessions--
	if ss.recv {
		if s.recvSrc[ss.src]--; s.recvSrc[ss.src] <= 0 {
			delete(s.recvSrc, ss.src)
		}
	}
	if ss.elem != nil {
		s.unused.Remove(ss.elem)
		ss.elem = nil
	}
}

// readDeadline is when a read of ss gives up: IdleTimeout from now, and
// before its first frame no later than FirstFrameTimeout after its
// handshake.
func (s *Server) readDeadline(ss *session) time.Time {
	d := time.Now().Add(s.opts.IdleTimeout)
	if !ss.used.Load() && ss.by.Before(d) {
		return ss.by
	}
	return d
}

// readFailed counts a session's read that failed by its deadline: unused
// (no first frame in time) or idle.
func (s *Server) readFailed(ss *session, err error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	edge.CountClosed("trueseal", edge.ReasonIdle) // unused or idle: a session that did nothing in time
	if ss.used.Load() {
		s.idle.Add(1)
		return
	}
	s.unusedN.Add(1)
	s.door.Refusals.Warn("trueseal session closed: nothing pushed or received since its handshake", ss.host,
		"first_frame_timeout", s.opts.FirstFrameTimeout)
}

// handshakeFailed counts and logs a handshake that failed, unless the
// connection was closed under it (by the door's admission, which counts
// and logs its own, or by Close).
func (s *Server) handshakeFailed(host string, err error) {
	if errors.Is(err, net.ErrClosed) {
		return
	}
	s.hsFail.Add(1)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		edge.CountClosed("trueseal", edge.ReasonLoginTimeout)
	}
	s.door.Refusals.Warn("trueseal handshake failed", host, "timed_out", errors.Is(err, os.ErrDeadlineExceeded))
}

// serveConn runs one connection: the handshake, then its session.
// release gives back its admission place, once the handshake is done.
func (s *Server) serveConn(c net.Conn, release func()) {
	host := edge.SourceHost(c.RemoteAddr())
	s.hsN.Add(1)
	inHandshake := true
	done := func() {
		if inHandshake {
			inHandshake = false
			s.hsN.Add(-1)
			release()
		}
	}
	defer done()
	_ = c.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	first, err := readMessage(c, nil)
	if err != nil {
		s.handshakeFailed(host, err)
		return
	}
	// NK's first message is e, es and an encrypted empty payload: 48
	// bytes that only the relay's static key opens. Anything it does not
	// open is taken as XX's first message (e alone, in clear).
	if hs, ok := s.openNK(first); ok {
		// A session place is taken before the relay answers: a client
		// refused sees its handshake fail.
		ss := s.admit(c, host, false)
		if ss == nil {
			return
		}
		defer s.end(ss)
		cs, err := s.answerNK(c, hs)
		if err != nil {
			s.handshakeFailed(host, err)
			return
		}
		done()
		s.pushSession(c, cs, ss)
		return
	}
	cs, peer, err := s.acceptXX(c, first)
	if err != nil {
		s.handshakeFailed(host, err)
		return
	}
	ss := s.admit(c, host, true)
	if ss == nil {
		return
	}
	defer s.end(ss)
	done()
	s.receiveSession(c, cs, peer, ss)
}

// ciphers are a session's two directions after the handshake.
type ciphers struct{ recv, send *noise.CipherState }

// openNK reads an NK first message; false: it is not one for this relay.
func (s *Server) openNK(first []byte) (*noise.HandshakeState, bool) {
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Pattern: noise.HandshakeNK, StaticKeypair: s.opts.Key})
	if err != nil {
		return nil, false
	}
	if _, _, _, err := hs.ReadMessage(nil, first); err != nil {
		return nil, false
	}
	return hs, true
}

// answerNK writes the relay's NK answer, which ends the handshake.
func (s *Server) answerNK(c net.Conn, hs *noise.HandshakeState) (ciphers, error) {
	msg, toRelay, toClient, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return ciphers{}, err
	}
	if _, err := c.Write(appendMessage(nil, msg)); err != nil {
		return ciphers{}, err
	}
	return ciphers{recv: toRelay, send: toClient}, nil
}

func (s *Server) acceptXX(c net.Conn, first []byte) (ciphers, []byte, error) {
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Pattern: noise.HandshakeXX, StaticKeypair: s.opts.Key})
	if err != nil {
		return ciphers{}, nil, err
	}
	if _, _, _, err := hs.ReadMessage(nil, first); err != nil {
		return ciphers{}, nil, err
	}
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return ciphers{}, nil, err
	}
	if _, err := c.Write(appendMessage(nil, msg)); err != nil {
		return ciphers{}, nil, err
	}
	third, err := readMessage(c, nil)
	if err != nil {
		return ciphers{}, nil, err
	}
	_, toRelay, toDevice, err := hs.ReadMessage(nil, third)
	if err != nil {
		return ciphers{}, nil, err
	}
	if toRelay == nil {
		return ciphers{}, nil, ErrHandshake
	}
	return ciphers{recv: toRelay, send: toDevice}, append([]byte(nil), hs.PeerStatic()...), nil
}
