package broker

import (
	"container/list"
	"net"
	"strconv"
	"sync"
	"time"

	"busbar/wire"
)

// Admission before authentication. A peer that has not logged in has
// proved nothing, so what it can make the broker hold is bounded on its
// own, well below what a node may use:
//
//   - a frame before login is at most MaxHelloBytes (a hello is a few
//     hundred bytes), so a connection logging in holds at most its read
//     buffer and one such frame;
//   - connections logging in at once are counted in two pools, one for
//     local (Unix socket) peers and one for network (TCP, TLS) peers, each
//     of MaxHandshakes, so a flood over TCP never reaches the Unix socket;
//     a network address may hold at most MaxHandshakesPerAddr of its pool;
//   - when a pool (or an address's share) is full, the connection that has
//     been waiting longest for its hello is closed to make room, with a
//     bus.error saying why: a flood of idle connections churns through the
//     pool while a client that says hello at once gets through (a
//     connection leaves the pool as soon as its hello is read). Refusing
//     the newcomer instead would let a flood lock every newcomer out for
//     the whole HandshakeTimeout.
//
// So everything the unauthenticated can make the broker hold is bounded
// by 2 × MaxHandshakes × (read buffer + MaxHelloBytes) plus their
// goroutines (docs/messaging.md#bad-input).

// MaxHelloBytes bounds a frame read before the peer has logged in; a
// longer one is answered TOO_LARGE and the connection closed.
const MaxHelloBytes = 8 << 10

// loginPlace is one place in a login pool: a bus connection logging in,
// or a connection of the HTTP listener that has not yet made an
// authenticated request (HoldLoginPlace). Guarded by handshakes.mu.
type loginPlace struct {
	elem  *list.Element // nil once it left its pool
	addr  string
	local bool
	conn  *conn     // the bus connection holding it, or nil
	nc    net.Conn  // what an eviction closes when conn is nil
	since time.Time // when it was admitted: it cannot be evicted for HandshakeGrace
}

// handshakePool is the places of one kind (local, network), oldest first.
type handshakePool struct {
	order  list.List      // of *loginPlace, oldest at the front
	byAddr map[string]int // network pool: places per remote address
}

// handshakes is the broker's admission of connections still logging in.
type handshakes struct {
	mu    sync.Mutex // guards the pools and every loginPlace
	local handshakePool
	net   handshakePool
}

func (h *handshakes) init() {
	h.local.byAddr = map[string]int{}
	h.net.byAddr = map[string]int{}
}

// peerAddr is the key a connection counts under in its pool: its host for
// a network peer, "" for a local one.
func peerAddr(nc net.Conn) (addr string, local bool) {
	a := nc.RemoteAddr()
	if a == nil || a.Network() == "unix" || a.Network() == "unixpacket" || a.String() == "" {
		return "", true
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), false
	}
	return host, false
}

// admitPlace counts p in its pool, and returns the place that must make
// room for it, if any, already out of its pool. When the place that would
// make room was admitted less than HandshakeGrace ago, nobody is evicted
// and p is not admitted (refused): a peer that logs in promptly keeps its
// place for that long whatever the flood, and evictions are at most
// MaxHandshakes per HandshakeGrace.
func (b *Broker) admitPlace(p *loginPlace, nc net.Conn) (evicted *loginPlace, refused bool) {
	p.addr, p.local = peerAddr(nc)
	p.since = time.Now()
	h := &b.hs
	h.mu.Lock()
	defer h.mu.Unlock()
	pool := &h.net
	if p.local {
		pool = &h.local
	}
	full := true
	switch {
	case !p.local && pool.byAddr[p.addr] >= b.opts.MaxHandshakesPerAddr:
		evicted = pool.oldest(func(o *loginPlace) bool { return o.addr == p.addr })
	case pool.order.Len() >= b.opts.MaxHandshakes:
		evicted = pool.oldest(func(*loginPlace) bool { return true })
	default:
		full = false
	}
	if full && (evicted == nil || p.since.Sub(evicted.since) < b.opts.HandshakeGrace) {
		return nil, true
	}
	if evicted != nil {
		pool.remove(evicted)
	}
	p.elem = pool.order.PushBack(p)
	pool.byAddr[p.addr]++
	return evicted, false
}

// refuseLogin counts and logs a newcomer refused because every place it
// could take is within its HandshakeGrace.
func (b *Broker) refuseLogin(nc net.Conn) {
	b.stats.handshakesRefused.Add(1)
	if skipped, ok := b.evictLog.allow(time.Now()); ok {
		b.log.Warn("connection refused while logging in: every place is held by a newer one", "remote", remote(nc),
			"max_handshakes", b.opts.MaxHandshakes, "per_addr", b.opts.MaxHandshakesPerAddr, "grace", b.opts.HandshakeGrace, "more_since_last_logged", skipped)
	}
}

// evict closes the holder of a place that made room for another: a bus
// connection is told why; an HTTP connection is closed at once.
func (b *Broker) evict(old *loginPlace) {
	b.stats.handshakesEvicted.Add(1)
	nc := old.nc
	if old.conn != nil {
		nc = old.conn.nc
	}
	if skipped, ok := b.evictLog.allow(time.Now()); ok {
		b.log.Warn("connection closed while logging in, to make room", "remote", remote(nc), "http", old.conn == nil,
			"max_handshakes", b.opts.MaxHandshakes, "per_addr", b.opts.MaxHandshakesPerAddr, "more_since_last_logged", skipped)
	}
	if old.conn != nil {
		old.conn.closeWith(wire.ResultOverload, b.handshakeLimitText())
		return
	}
	_ = old.nc.Close()
}

// admitHandshake counts c as logging in, and closes the connection that
// must make room for it, if any; false: c was refused instead (told why,
// and closing).
func (b *Broker) admitHandshake(c *conn) bool {
	c.place = &loginPlace{conn: c}
	old, refused := b.admitPlace(c.place, c.nc)
	if refused {
		c.place = nil
		b.refuseLogin(c.nc)
		c.closeWith(wire.ResultOverload, "too many connections are logging in, all of them for less than "+b.opts.HandshakeGrace.String()+"; retry")
		return false
	}
	if old != nil {
		b.evict(old)
	}
	return true
}

// handshakeDone stops counting c as logging in (it logged in, failed, or
// was evicted).
func (b *Broker) handshakeDone(c *conn) {
	if c.place != nil {
		b.leavePlace(c.place)
	}
}

func (b *Broker) leavePlace(p *loginPlace) {
	h := &b.hs
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.elem == nil {
		return
	}
	if p.local {
		h.local.remove(p)
	} else {
		h.net.remove(p)
	}
}

// HoldLoginPlace counts nc, a connection of another listener of this
// process that has not authenticated yet (serve's HTTP listener: until
// its first request with the token, or its upgrade to the bus over
// WebSocket), in the same login pools as the bus's connections logging
// in: local peers in one, network peers in the other, MaxHandshakes each
// and MaxHandshakesPerAddr per network address. When the pool is full the
// oldest place makes room, whoever holds it; an HTTP connection evicted
// is closed at once; when every place it could take is within its
// HandshakeGrace, nc is closed instead. release gives the place back; it is idempotent and
// safe after an eviction.
func (b *Broker) HoldLoginPlace(nc net.Conn) (release func()) {
	p := &loginPlace{nc: nc}
	old, refused := b.admitPlace(p, nc)
	if refused {
		b.refuseLogin(nc)
		_ = nc.Close()
		return func() {}
	}
	if old != nil {
		b.evict(old)
	}
	return func() { b.leavePlace(p) }
}

func (pool *handshakePool) oldest(match func(*loginPlace) bool) *loginPlace {
	for e := pool.order.Front(); e != nil; e = e.Next() {
		if o := e.Value.(*loginPlace); match(o) {
			return o
		}
	}
	return nil
}

func (pool *handshakePool) remove(p *loginPlace) {
	pool.order.Remove(p.elem)
	p.elem = nil
	if pool.byAddr[p.addr]--; pool.byAddr[p.addr] <= 0 {
		delete(pool.byAddr, p.addr)
	}
}

// handshakeLimitText says why a connection was closed while logging in.
func (b *Broker) handshakeLimitText() string {
	return "closed while logging in: too many connections were logging in (limits " +
		strconv.Itoa(b.opts.MaxHandshakes) + " per kind, " + strconv.Itoa(b.opts.MaxHandshakesPerAddr) +
		" per address); the oldest made room. Log in promptly and retry"
}

// refuseConn tells a peer the broker will not serve it, then closes it. It
// writes from the caller's goroutine, bounded by refuseWriteTimeout, as
// the connection has no writer yet.
func refuseConn(nc net.Conn, res wire.Result, text string) {
	_ = nc.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	w := wire.NewWriter(nc)
	if w.WriteMessage(errorFrame(res, text)) == nil {
		_ = w.Flush()
	}
	_ = nc.Close()
}

// floodLogInterval is how often a warning that a flood can repeat (a
// connection evicted while logging in, one refused at capacity) is
// written at most; the ones in between are counted into the next.
const floodLogInterval = time.Second

// throttle passes one log line per floodLogInterval and counts the rest.
type throttle struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// allow reports whether to log now, and how many lines were skipped
// since the last one logged.
func (t *throttle) allow(now time.Time) (skipped int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.last) < floodLogInterval {
		t.skipped++
		return 0, false
	}
	t.last, skipped, t.skipped = now, t.skipped, 0
	return skipped, true
}
