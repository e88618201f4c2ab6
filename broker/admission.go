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

// handshakePool is the connections of one kind still logging in, oldest
// first.
type handshakePool struct {
	order  list.List      // of *conn, oldest at the front
	byAddr map[string]int // network pool: connections per remote address
}

// handshakes is the broker's admission of connections still logging in.
type handshakes struct {
	mu    sync.Mutex // guards the pools and every conn.handshaking
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

// admit counts c as logging in, and returns the connection that must make
// room for it, if any.
func (b *Broker) admitHandshake(c *conn) (evicted *conn) {
	addr, local := peerAddr(c.nc)
	h := &b.hs
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &h.net
	if local {
		p = &h.local
	}
	switch {
	case !local && p.byAddr[addr] >= b.opts.MaxHandshakesPerAddr:
		evicted = p.oldest(func(o *conn) bool { return o.hsAddr == addr })
	case p.order.Len() >= b.opts.MaxHandshakes:
		evicted = p.oldest(func(*conn) bool { return true })
	}
	if evicted != nil {
		p.remove(evicted)
	}
	c.hsAddr, c.hsLocal = addr, local
	c.handshaking = p.order.PushBack(c)
	p.byAddr[addr]++
	return evicted
}

// handshakeDone stops counting c as logging in (it logged in, failed, or
// was evicted).
func (b *Broker) handshakeDone(c *conn) {
	h := &b.hs
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.handshaking == nil {
		return
	}
	if c.hsLocal {
		h.local.remove(c)
	} else {
		h.net.remove(c)
	}
}

func (p *handshakePool) oldest(match func(*conn) bool) *conn {
	for e := p.order.Front(); e != nil; e = e.Next() {
		if o := e.Value.(*conn); match(o) {
			return o
		}
	}
	return nil
}

func (p *handshakePool) remove(c *conn) {
	p.order.Remove(c.handshaking)
	c.handshaking = nil
	if p.byAddr[c.hsAddr]--; p.byAddr[c.hsAddr] <= 0 {
		delete(p.byAddr, c.hsAddr)
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
