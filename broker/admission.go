package broker

import (
	"container/list"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
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
//   - when a pool (or an address's share) is full, one place is taken
//     back to make room, its connection closed with a bus.error saying
//     why. Only a place held for HandshakeGrace or longer, or whose peer
//     has sent nothing of a hello for HandshakeIdleGrace (nothing at all,
//     or nothing more after a part), can be taken; among those, the one
//     whose peer has sent the least of a valid hello
//     (helloScan: bytes of a frame that is, so far, a hello; garbage
//     counts as nothing), and of those the oldest. When no place is past
//     its grace the newcomer is refused instead, so evictions are at most
//     MaxHandshakes per HandshakeIdleGrace, however fast the flood, and a
//     flood of idle or stalled peers must come that fast to refuse anyone.
//
// So a peer that sends its hello as soon as it reads bus.info is never
// evicted by a flood: either its hello is read within its grace (and a
// connection leaves the pool as soon as its hello is read), or the broker
// has read some of it, and then it has sent more of a hello than any idle
// peer and is taken only after every one of them. A flood of idle
// connections churns through the pool at most MaxHandshakes per grace;
// a flood that sends partial hellos to keep its places must send bytes
// for each, up to MaxHelloBytes. What a flood can still do is fill every
// place with younger ones, so that a newcomer is refused ("retry") until
// the oldest is past its grace: refused up front, never cut off halfway.
// Refusing every newcomer without a grace would let a flood lock them all
// out for the whole HandshakeTimeout; evicting without one would let it
// evict at its own pace.
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
	// progress is how much of a valid hello the peer has sent (helloScan;
	// helloRead once it is whole). Written by the connection's reader, so
	// atomic; always 0 for an HTTP place (HoldLoginPlace).
	progress atomic.Int64
	// moved is when progress last grew (UnixNano; 0: never): a place
	// whose peer sent nothing more for HandshakeIdleGrace may be taken
	// back before its HandshakeGrace.
	moved atomic.Int64
}

// stalledSince is when p's peer last sent a byte of a hello, or when p
// was admitted if it sent none.
func (p *loginPlace) stalledSince() time.Time {
	if m := p.moved.Load(); m != 0 {
		return time.Unix(0, m)
	}
	return p.since
}

// handshakePool is the places of one kind (local, network), oldest first.
type handshakePool struct {
	order  list.List      // of *loginPlace, oldest at the front
	byAddr map[string]int // network pool: places per remote address
}

// handshakes is the broker's admission of connections still logging in.
type handshakes struct {
	mu    sync.Mutex // guards the pools and every loginPlace, and peekBuf
	local handshakePool
	net   handshakePool
	// peekBuf holds what victim peeks of a place's socket (unread).
	peekBuf [prefixLen + MaxHelloBytes]byte
}

// unread is the progress of what p's peer has sent that p's reader has
// not read yet, for a place whose reader has read nothing: on a busy
// broker a prompt client's whole hello can wait in its socket past
// HandshakeIdleGrace, and it must not then rank below a peer that drips
// a byte at a time. It peeks at the socket (peekConn), leaving the bytes
// for the reader; 0 where the connection cannot be peeked (TLS, a pipe,
// an HTTP place) or nothing waits. Called with h.mu held.
func (h *handshakes) unread(p *loginPlace) int64 {
	if p.conn == nil {
		return 0 // an HTTP place: no hello to measure
	}
	n := peekConn(p.conn.nc, h.peekBuf[:])
	if n <= 0 {
		return 0
	}
	var scan helloScan
	return scan.feed(h.peekBuf[:n])
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
// room for it, if any, already out of its pool: of the places past their
// grace, the one whose peer has sent the least of a hello, the oldest of
// those (victim). When every place that could make room was admitted less
// than HandshakeGrace ago, nobody is evicted and p is not admitted
// (refused): a peer that logs in promptly keeps its place for that long
// whatever the flood, and evictions are at most MaxHandshakes per
// HandshakeGrace.
func (b *Broker) admitPlace(p *loginPlace, nc net.Conn) (evicted *loginPlace, refused bool) {
	p.addr, p.local = peerAddr(nc)
	h := &b.hs
	h.mu.Lock()
	defer h.mu.Unlock()
	p.since = time.Now() // under the lock: a pool's places are in the order of since (victim)
	pool := &h.net
	if p.local {
		pool = &h.local
	}
	full := true
	graced := p.since.Add(-b.opts.HandshakeGrace)         // admitted before this: past its grace
	idleGraced := p.since.Add(-b.opts.HandshakeIdleGrace) // …or, having sent nothing, before this
	switch {
	case !p.local && pool.byAddr[p.addr] >= b.opts.MaxHandshakesPerAddr:
		evicted = pool.victim(graced, idleGraced, p.addr, h.unread)
	case pool.order.Len() >= b.opts.MaxHandshakes:
		evicted = pool.victim(graced, idleGraced, "", h.unread)
	default:
		full = false
	}
	if full && evicted == nil {
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
	b.refusals.Warn("connection refused while logging in: every place is held by a newer one", remoteHost(nc),
		"max_handshakes", b.opts.MaxHandshakes, "per_addr", b.opts.MaxHandshakesPerAddr, "grace", b.opts.HandshakeGrace)
}

// evict closes the holder of a place that made room for another: a bus
// connection is told why; an HTTP connection is closed at once.
func (b *Broker) evict(old *loginPlace) {
	b.stats.handshakesEvicted.Add(1)
	nc := old.nc
	if old.conn != nil {
		nc = old.conn.nc
	}
	b.refusals.Warn("connection closed while logging in, to make room", remoteHost(nc), "http", old.conn == nil,
		"hello_progress", old.progress.Load(), "max_handshakes", b.opts.MaxHandshakes, "per_addr", b.opts.MaxHandshakesPerAddr)
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
// was evicted). Only c's reader calls it.
func (b *Broker) handshakeDone(c *conn) {
	if c.place != nil {
		b.leavePlace(c.place)
		c.place = nil // and c.hello measures no more
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
// and MaxHandshakesPerAddr per network address. When the pool is full a
// place past its HandshakeGrace makes room, whoever holds it: the one
// whose peer has sent the least of a hello, the oldest of equals (an
// HTTP place counts as having sent nothing); an HTTP connection evicted
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

// victim is the place that makes room in pool (or, with addr, in that
// address's share): of those admitted no later than graced, the one with
// the least progress, the oldest of equals; nil when none is past its
// grace. A place whose reader has read nothing counts what waits unread
// on its socket (unread). The places are in the order admitted, so it
// stops at the first one still within its grace, or at the first that
// has sent nothing (none can have less): under a flood of idle peers it
// looks at one.
func (pool *handshakePool) victim(graced, idleGraced time.Time, addr string, unread func(*loginPlace) int64) *loginPlace {
	var v *loginPlace
	least := int64(0)
	for e := pool.order.Front(); e != nil; e = e.Next() {
		o := e.Value.(*loginPlace)
		if o.since.After(idleGraced) { // idleGraced is never before graced
			break // this one and every younger one are within every grace
		}
		if addr != "" && o.addr != addr {
			continue
		}
		if o.since.After(graced) && o.stalledSince().After(idleGraced) {
			continue // within its grace, and its peer sent some of a hello lately
		}
		n := o.progress.Load()
		if n == 0 {
			n = unread(o)
		}
		if v == nil || n < least {
			v, least = o, n
			if n == 0 {
				break // none has less, and it is the oldest of those
			}
		}
	}
	return v
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
		" per address); one that had sent the least of a hello made room. Log in promptly and retry"
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

// helloRead is the progress of a peer whose whole hello has arrived: more
// than any partial one. (It leaves the pool as soon as the hello is read;
// this covers the moment between.)
const helloRead = prefixLen + MaxHelloBytes + 1

// prefixLen is a stream frame's length prefix (wire's framing).
const prefixLen = 4

// helloMeter is what a connection's reader reads from: its socket, with
// what arrives while it holds a place in a login pool measured as
// progress towards a hello (loginPlace.progress). Owned by the reader.
type helloMeter struct {
	c    *conn
	scan helloScan
}

func (m *helloMeter) Read(p []byte) (int, error) {
	n, err := m.c.nc.Read(p)
	if pl := m.c.place; pl != nil && n > 0 {
		if got := m.scan.feed(p[:n]); got > pl.progress.Load() {
			pl.progress.Store(got)
			pl.moved.Store(time.Now().UnixNano())
		} else {
			pl.progress.Store(got) // garbage: back to none
		}
	}
	return n, err
}

// helloScan follows the bytes of a stream, before login, as far as they
// can be the start of a hello frame: a length prefix of at most
// MaxHelloBytes, the opening "---" line, header lines ("key: value", keys
// of letters, digits and "-._"), the closing "---" line, and a JSON
// object's bytes. Its progress is how many bytes were such a start, 0 for
// good once one was not (so garbage earns no place), and helloRead once
// the whole frame is in (over WebSocket, where a message arrives whole,
// a hello counts only then). It checks the shape only, one byte at a time and
// without allocating: a frame it passes may still be refused by the
// handshake, and one it fails (which no busbar client sends) only loses
// its priority in the pool, never its connection.
type helloScan struct {
	n     int64  // bytes of the stream that fit, prefix included
	size  int64  // the frame's length, once the prefix is in
	state uint8  // what the next byte must be
	mark  uint8  // bytes of a "---" delimiter matched
	bad   bool   // a byte did not fit: progress 0 from now on
	pre   uint32 // the length prefix, as it arrives
}

const (
	scanPrefix = iota
	scanOpen   // "---\n"
	scanLine   // at the start of a header line or the closing "---"
	scanKey
	scanColon // ": " after a key: the space
	scanValue
	scanClose // "---" then "\n" or the frame's end
	scanBody  // before the object's "{"
	scanJSON  // within it
	scanDone
)

func (s *helloScan) feed(p []byte) int64 {
	for _, b := range p {
		if s.bad || s.state == scanDone {
			break
		}
		if !s.step(b) {
			s.bad = true
			break
		}
		s.n++
		if s.state != scanPrefix && s.n == prefixLen+s.size {
			s.state = scanDone
		}
	}
	switch {
	case s.bad:
		return 0
	case s.state == scanDone:
		return helloRead
	}
	return s.n
}

// step takes one byte, reporting whether it fits a hello's start.
func (s *helloScan) step(b byte) bool {
	switch s.state {
	case scanPrefix:
		s.pre = s.pre<<8 | uint32(b)
		if s.n == prefixLen-1 {
			s.size = int64(s.pre)
			s.state = scanOpen
			return s.size >= int64(len("---\n---")) && s.size <= MaxHelloBytes
		}
		return s.pre <= MaxHelloBytes>>(8*(prefixLen-1-s.n))
	case scanOpen:
		return s.delimiter(b, scanLine)
	case scanLine:
		if b == '-' {
			s.mark, s.state = 1, scanClose
			return true
		}
		s.state = scanKey
		return keyByte(b)
	case scanKey:
		if b == ':' {
			s.state = scanColon
			return true
		}
		return keyByte(b)
	case scanColon:
		s.state = scanValue
		return b == ' '
	case scanValue:
		if b == '\n' {
			s.state = scanLine
			return true
		}
		return b >= ' ' && b != 0x7f
	case scanClose:
		return s.delimiter(b, scanBody)
	case scanBody:
		if b == '{' {
			s.state = scanJSON
			return true
		}
		return b == ' ' || b == '\t' || b == '\r' || b == '\n'
	case scanJSON:
		return b >= ' ' && b != 0x7f || b == '\t' || b == '\r' || b == '\n'
	}
	return false
}

// delimiter takes a byte of a "---" line, and once its newline is in
// goes on to next.
func (s *helloScan) delimiter(b byte, next uint8) bool {
	if s.mark == 3 {
		s.mark, s.state = 0, next
		return b == '\n'
	}
	s.mark++
	return b == '-'
}

// keyByte reports whether b may be in a hello's header key.
func keyByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.'
}
