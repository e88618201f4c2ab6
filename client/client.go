package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// Client is one process's connection to a broker, made again after a
// loss within Options.MaxReconnects attempts (reconnect.go). It is safe for
// concurrent use.
//
// Its state is split by feature, each part with its own lock (doc.go has
// the lock order): messaging and the call table here under mu, discovery
// (registry watches, announcements) in discovery, replicated state in
// state.
type Client struct {
	// Set once in Connect before the loops start; read-only after.
	opts    Options
	log     *slog.Logger
	servers []string // Options' endpoints, in order
	exec    Executor
	pool    *pool           // the default executor, owned; nil when the caller gave one
	ctx     context.Context // cancelled by shutdown: callbacks' contexts derive from it
	cancel  context.CancelFunc
	done    chan struct{} // closed by shutdown, once

	// end is set once, under mu, when shutdown begins: why the client
	// ended. Loaded anywhere without a lock.
	end atomic.Pointer[ending]

	// cur is the live connection, nil while reconnecting; stored under mu
	// (with up), loaded anywhere. last is the latest connection, live or
	// not: its welcome describes the node (Node, Epoch, MaxPayload).
	cur, last atomic.Pointer[conn]

	// Messaging and the call table: guarded by mu. Control messages
	// queued under mu (bus.sub, bus.unsub, bus.handle, bus.unhandle)
	// leave in the order they were decided.
	mu       sync.Mutex
	calls    map[string]*pending // every open call: messaging, discovery and state
	scopes   map[*Scope]struct{}
	subs     map[string][]*Subscription // by channel or pattern; copy-on-write: a slice read under mu may be used after
	subPats  []string                   // the keys of subs that are wildcard patterns; copy-on-write
	subReg   map[string]*regWait        // the broker's verdict on the current subscriber set of a channel
	subQueue map[string]string          // the queue a channel's subscriptions belong to, when they do
	handlers map[string]*Registration
	up       chan struct{} // while cur is nil: closed when a connection is live again

	discovery discovery   // registry watches and announcements: its own lock
	state     stateClient // replicated state's watches and clocks: its own locks

	durable  atomic.Pointer[DurableSession] // the relay receive session, if any (durable.go)
	watchers connWatchers                   // NotifyConn's functions: their own lock
	tap      atomic.Pointer[Tap]            // the live tap, if any (tap.go)

	// Atomics, shared without a lock.
	clock         atomic.Int64 // the reader's latest clock read, a hotpath.Instant (see readClock); written by the reader
	streamsQueued atomic.Int64 // stream messages handed to the executor and not yet run
	drops         drops        // what was dropped rather than block, by reason (Stats)
	handoffs      handoffs     // goroutine hand-offs, for tests (handoffs.go)

	loops sync.WaitGroup // the supervisor, which joins each connection's loops
}

// ending is why the client ended (Client.end).
type ending struct {
	err    error // what Err returns
	closed bool  // shutdown has begun: no call starts, every open call fails
}

// closing reports whether shutdown has begun.
func (c *Client) closing() bool {
	e := c.end.Load()
	return e != nil && e.closed
}

// pending is a call waiting for its answer.
// Its fields but err are set once by registerOnLocked; read-only after.
// Whoever takes it out of Client.calls (under mu) sends the one answer.
type pending struct {
	answer chan *wire.Message // 1-slot; nil message: no answer will come (err says why)
	err    error              // written by fail before the nil answer
	scope  *Scope             // nil for control calls
	cn     *conn              // the connection it was sent on: its loss fails the call
	// onAnswer, when set, runs on the reader with the answer before
	// anything read after it is handled (a watch starts there).
	onAnswer func(*wire.Message)
	// view: a request's call, answered by answerView, which sets reply or
	// rerr before it sends viewAnswer. Set under mu at registration.
	view  bool
	reply *Message
	rerr  *RequestError
}

// fail ends the call without an answer.
func (p *pending) fail(why error) {
	p.err = why
	p.answer <- nil
}

// Connect dials the broker, performs the handshake and returns a
// registered client. With several servers it tries each in order, once,
// and returns the first that answers; their errors if none does.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	opts.setDefaults()
	if err := auth.ValidNodeName(opts.Node); err != nil {
		return nil, err
	}
	if err := opts.checkReconnects(); err != nil {
		return nil, err
	}
	if opts.IID != "" {
		if err := wire.ValidIID(opts.IID); err != nil {
			return nil, err
		}
	}
	servers, err := opts.endpoints()
	if err != nil {
		return nil, err
	}
	c := &Client{
		opts: opts, log: opts.Logger.With("node", opts.Node), servers: servers,
		calls: map[string]*pending{}, subs: map[string][]*Subscription{}, subReg: map[string]*regWait{},
		handlers: map[string]*Registration{}, scopes: map[*Scope]struct{}{},
		done: make(chan struct{}),
	}
	c.discovery.init(c)
	c.state.init(c)
	cn, r, err := c.dialFirst(ctx)
	if err != nil {
		return nil, err
	}
	if c.opts.IID == "" {
		c.opts.IID = cn.welcome.IID // a reconnect presents the same instance
	}
	c.exec = opts.Executor
	if c.exec == nil {
		c.pool = newPool(opts.Workers, opts.DispatchQueue)
		c.exec = c.pool
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.cur.Store(cn)
	c.last.Store(cn)
	c.startWriter(cn)
	c.startReader(cn, r)
	c.loops.Add(1)
	go func() { defer c.loops.Done(); c.supervise(cn) }()
	return c, nil
}

// dialFirst tries each server in order, and tries them all again, waiting
// as between reconnect passes, while the brokers refuse with a reason that
// passes (ErrRefused: at capacity, too many logging in, which a flood of
// connections can make for a while), until ctx's deadline or, when it has
// none, HandshakeTimeout from now; no longer than Options.RefusedRetry.
func (c *Client) dialFirst(ctx context.Context) (*conn, *wire.Reader, error) {
	giveUp, ok := ctx.Deadline()
	if !ok {
		giveUp = time.Now().Add(c.opts.HandshakeTimeout)
	}
	if r := c.opts.RefusedRetry; r != 0 {
		if t := time.Now().Add(r); t.Before(giveUp) { // a negative one: at once
			giveUp = t
		}
	}
	var refused error // the last refusal, once there was one
	for pass := 1; ; pass++ {
		cn, r, err := c.dialPass(ctx)
		if refused != nil && err != nil && !errors.Is(err, ErrRefused) && (ctx.Err() != nil || !time.Now().Before(giveUp) || isTimeout(err)) {
			// The time the refusals left ran out in this attempt: the
			// refusal is what the caller needs to know.
			return nil, nil, fmt.Errorf("%w (then: %v)", refused, err)
		}
		if err == nil || !errors.Is(err, ErrRefused) || ctx.Err() != nil {
			return cn, r, err
		}
		refused = err
		wait := c.opts.reconnectWait(pass)
		if time.Now().Add(wait).After(giveUp) {
			return nil, nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, err
		case <-t.C:
		}
	}
}

// isTimeout reports whether err is a timeout (a dial or handshake that
// ran into its deadline).
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// dialPass tries each server once, in order.
func (c *Client) dialPass(ctx context.Context) (*conn, *wire.Reader, error) {
	var errs []error
	for _, s := range c.servers {
		cn, r, err := c.dialConn(ctx, s)
		if err == nil {
			return cn, r, nil
		}
		if len(c.servers) > 1 {
			err = fmt.Errorf("%s: %w", s, err)
		}
		errs = append(errs, err)
		if ctx.Err() != nil || permanent(err) {
			break
		}
	}
	if len(errs) == 1 {
		return nil, nil, errs[0]
	}
	return nil, nil, fmt.Errorf("client: no server answered: %w", errors.Join(errs...))
}

// conn is the latest connection (never nil once Connect returned).
func (c *Client) conn() *conn { return c.last.Load() }

// Node is the registered node name.
func (c *Client) Node() string { return c.conn().welcome.Node }

// Addr is the node's address, "<node>.bus".
func (c *Client) Addr() string { return c.Node() + ".bus" }

// IID is this client instance's id, as the broker registered it (the same
// on every reconnect).
func (c *Client) IID() string { return c.conn().welcome.IID }

// Epoch increments each time this node name connects to the broker; a
// reconnect brings the next one.
func (c *Client) Epoch() uint64 { return c.conn().welcome.Epoch }

// Broker is the node name of the broker of the latest connection.
func (c *Client) Broker() string { return c.conn().welcome.Broker }

// Connected reports whether a connection is live now: false while the
// client is reconnecting and once it has ended.
func (c *Client) Connected() bool { return c.cur.Load() != nil }

// Done is closed when the client has ended: Close was called, or the
// connection was lost and not made again (reconnecting is off, gave up,
// or cannot succeed); Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the client ended, or nil while it is up (or reconnecting).
func (c *Client) Err() error {
	if e := c.end.Load(); e != nil {
		return e.err
	}
	return nil
}

// Close ends the client: every scope closes, open calls fail, a reconnect
// under way stops, and Close waits for the client's goroutines and for
// running callbacks (whose contexts are cancelled) to return. A callback
// must therefore not call Close itself (it would wait for itself); it may
// start `go c.Close()`.
//
// A client whose connection ended for good (Done is closed) does not come
// back: the application decides what to redo and calls Connect again; the
// broker gives the new connection the next epoch.
func (c *Client) Close() error {
	c.shutdown(ErrClosed)
	c.loops.Wait()
	if c.pool != nil {
		c.pool.close()
	}
	return nil
}

// shutdown ends the client once, failing every open call.
func (c *Client) shutdown(why error) {
	c.mu.Lock()
	if c.closing() {
		c.mu.Unlock()
		return
	}
	c.end.Store(&ending{err: why, closed: true})
	cn := c.cur.Load()
	calls := c.calls
	c.calls = map[string]*pending{}
	scopes := make([]*Scope, 0, len(c.scopes))
	for s := range c.scopes {
		scopes = append(scopes, s)
	}
	c.mu.Unlock()
	for _, p := range calls {
		p.fail(why)
	}
	c.discovery.endAll(why)
	c.state.endAll(why)
	for _, s := range scopes {
		// Revoke, so callbacks still queued in the executor do not run.
		subs, regs := s.markClosed()
		for _, sub := range subs {
			sub.Close()
		}
		for _, r := range regs {
			r.Close()
		}
	}
	if cn != nil {
		cn.out.Close(nil)
	}
	c.cancel()
	close(c.done)
}

func (c *Client) dispatch(cn *conn, m *wire.Message) {
	switch m.Value(wire.HeaderType) {
	case wire.TypeResponse:
		c.answer(m)
	case wire.TypeEvent:
		switch m.Value(wire.HeaderCommand) {
		case wire.CmdError:
			c.brokerSays(cn, m)
		case wire.CmdGoodbye:
			c.log.Info("broker is shutting down")
		case wire.CmdService:
			c.discovery.serviceEvent(m)
		case wire.CmdStateDelta:
			c.state.delta(cn, m)
		case wire.CmdStateReset:
			c.state.reset(cn, m)
		case wire.CmdDurableDeliver:
			c.durableDeliver(m)
		case wire.CmdDurableEnded:
			c.durableEnded(cn, m)
		case wire.CmdTapEvent:
			c.tapEvent(cn, m)
		default:
			c.deliverEvent(cn, m)
		}
	}
}

// answer completes the call a response belongs to.
func (c *Client) answer(m *wire.Message) {
	c.mu.Lock()
	id := m.Value(wire.HeaderReplyTo)
	p := c.calls[id]
	delete(c.calls, id)
	c.mu.Unlock()
	if p != nil {
		if p.onAnswer != nil {
			p.onAnswer(m)
		}
		c.handoffs.answers.Add(1)
		p.answer <- m
	}
}

// call sends m and registers for its answer; it returns the answer, or nil
// and why none came. While the client is reconnecting it waits (within
// deadline) for the connection to be back before it sends anything.
func (c *Client) call(ctx context.Context, s *Scope, m *wire.Message, deadline time.Time) (*wire.Message, error) {
	return c.callOn(ctx, s, func(*conn) *wire.Message { return m }, deadline)
}

// callOn is call for a message that depends on the connection it goes
// on (a relay proof signs that connection's nonce): build makes it once
// the connection is known, again if that connection is lost before the
// message left.
func (c *Client) callOn(ctx context.Context, s *Scope, build func(*conn) *wire.Message, deadline time.Time) (*wire.Message, error) {
	var stale *conn // a connection seen closing: wait for the next one
	for {
		if err := c.awaitUp(ctx, s, deadline, stale); err != nil {
			return nil, err
		}
		cn := c.cur.Load()
		if cn == nil {
			continue
		}
		m := build(cn)
		id := m.Value(wire.HeaderID)
		p, err := c.registerOn(cn, id, nil, s)
		if errors.Is(err, errNotConnected) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// The caller is not a network goroutine, so it may write itself when
		// the connection is idle: one hand-off less per call.
		out := p.cn.out
		if !out.WriteThrough(m, deadline) && !out.Enqueue(m, deadline) {
			c.forget(id)
			if out.Closing() { // ending before m left: m was never sent
				stale = p.cn
				continue
			}
			return nil, errQueueFull
		}
		return c.await(ctx, p, id, deadline)
	}
}

// awaitUp returns once a connection other than stale is live, or why
// none will be before deadline (zero: only ctx bounds the wait): the
// client ended (its Err), the scope closed, or errUnreachable.
func (c *Client) awaitUp(ctx context.Context, s *Scope, deadline time.Time, stale *conn) error {
	if cur := c.cur.Load(); cur != nil && cur != stale && c.end.Load() == nil {
		return nil // the common case: no lock, no timer
	}
	var (
		timer   *time.Timer
		expired <-chan time.Time
		sdone   <-chan struct{}
	)
	if !deadline.IsZero() {
		timer = time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		expired = timer.C
	}
	if s != nil {
		sdone = s.done
	}
	for {
		c.mu.Lock()
		e, cur, up := c.end.Load(), c.cur.Load(), c.up
		c.mu.Unlock()
		var wait <-chan struct{}
		switch {
		case e != nil:
			return e.err
		case cur != nil && cur != stale:
			return nil
		case cur != nil:
			wait = stale.done
		default:
			wait = up
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return errUnreachable
		case <-expired:
			return errUnreachable
		case <-sdone:
			return ErrScopeClosed
		case <-c.done:
		}
	}
}

// startLocked registers a call on the live connection and queues its
// message; c.mu is held, so messages decided under the lock leave in that
// order. Without a live connection it returns errNotConnected, queueing
// nothing.
func (c *Client) startLocked(s *Scope, m *wire.Message, deadline time.Time) (*pending, error) {
	id := m.Value(wire.HeaderID)
	cn := c.cur.Load()
	p, err := c.registerOnLocked(cn, s, id, nil)
	if err != nil {
		return nil, err
	}
	if !cn.out.Enqueue(m, deadline) {
		delete(c.calls, id)
		if cn.out.Closing() {
			return nil, errNotConnected
		}
		return nil, errQueueFull
	}
	return p, nil
}

// register opens a call on the live connection, waiting for the answer to
// id (see registerOnLocked). Discovery and state register their calls
// here, or under their own lock, which comes before mu.
func (c *Client) register(s *Scope, id string, onAnswer func(*wire.Message)) (*pending, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registerOnLocked(c.cur.Load(), s, id, onAnswer)
}

// registerOn opens a call on cn, which must be the live connection.
func (c *Client) registerOn(cn *conn, id string, onAnswer func(*wire.Message), s *Scope) (*pending, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registerOnLocked(cn, s, id, onAnswer)
}

// registerOnLocked opens a call on cn waiting for the answer to id;
// onAnswer, if not nil, runs on the reader with the answer. A call cannot
// open once shutdown has begun (it fails with Err), on a closed scope, or
// on a connection that is not the live one (errNotConnected).
func (c *Client) registerOnLocked(cn *conn, s *Scope, id string, onAnswer func(*wire.Message)) (*pending, error) {
	if e := c.end.Load(); e != nil && e.closed {
		return nil, e.err
	}
	if s != nil && s.closed.Load() {
		return nil, ErrScopeClosed
	}
	if cn == nil || cn != c.cur.Load() {
		return nil, errNotConnected
	}
	p := &pending{answer: make(chan *wire.Message, 1), scope: s, cn: cn, onAnswer: onAnswer}
	c.calls[id] = p
	return p, nil
}

// await waits for a started call's answer.
func (c *Client) await(ctx context.Context, p *pending, id string, deadline time.Time) (*wire.Message, error) {
	timer := getTimer(time.Until(deadline))
	defer putTimer(timer)
	var sdone <-chan struct{}
	if p.scope != nil {
		sdone = p.scope.done
	}
	select {
	case a := <-p.answer:
		if a == nil {
			return nil, p.err
		}
		return a, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, errDeadline
	case <-timer.C:
		c.forget(id)
		return nil, errDeadline
	case <-sdone:
		c.forget(id)
		return nil, ErrScopeClosed
	}
}

// Timers of awaited calls are reused: a call's wait costs no timer
// allocation. Since Go 1.23 a stopped timer delivers nothing stale, so a
// reused one fires only for its new wait.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// getTimer returns a timer firing after d.
func getTimer(d time.Duration) *time.Timer {
	t := timerPool.Get().(*time.Timer)
	t.Reset(d)
	return t
}

// putTimer stops t and keeps it for reuse.
func putTimer(t *time.Timer) {
	t.Stop()
	timerPool.Put(t)
}

var (
	errQueueFull = errors.New("client: outbound queue full")
	errDeadline  = errors.New("client: deadline passed")
	// errUnreachable: the deadline passed while the client was
	// reconnecting; nothing was sent.
	errUnreachable = fmt.Errorf("%w: not connected to a broker (reconnecting)", errDeadline)
	// errNotConnected: no live connection to register a call on (the
	// caller waits for one, or restores the work later).
	errNotConnected = errors.New("client: not connected")
)

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

// deadline is when a call made now must end.
func (c *Client) deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(c.opts.DefaultTimeout)
}

// controlMessage builds a bus.* request to the broker.
func controlMessage(cmd, body string) *wire.Message {
	return wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, newID()).WithBody([]byte(body))
}

// subscribeMessage is the bus.sub of channel, as a member of queue when
// it is not "".
func subscribeMessage(channel, queue string) *wire.Message {
	m := controlMessage(wire.CmdSubscribe, channel)
	if queue != "" {
		m = m.WithHeader(wire.HeaderQueue, queue)
	}
	return m
}

// controlResult turns the broker's answer to a bus.* request into an error.
func controlResult(a *wire.Message, err error) error {
	if err != nil {
		return callError(err)
	}
	if wire.ResponseRC(a).IsError() {
		return requestError(a)
	}
	return nil
}

// Directory asks the broker for its directory of nodes.
func (c *Client) Directory(ctx context.Context) ([]wire.NodeInfo, error) {
	a, err := c.call(ctx, nil, controlMessage(wire.CmdDirectory, ""), c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		return nil, err
	}
	var out []wire.NodeInfo
	if err := json.Unmarshal(a.Body(), &out); err != nil {
		return nil, fmt.Errorf("client: malformed directory: %w", err)
	}
	return out, nil
}

// ttlDeadline is when an incoming message stops being worth handling.
func ttlDeadline(m *wire.Message) hotpath.Instant {
	v, ok := m.Get(wire.HeaderTTL)
	if !ok {
		return 0
	}
	return deadlineFrom(v, hotpath.Now())
}

// deadlineFrom is now plus a ttl header value (zero when malformed).
func deadlineFrom(v string, now hotpath.Instant) hotpath.Instant {
	ms, ok := parseTTL(v)
	if !ok {
		return 0
	}
	return now.Add(time.Duration(ms) * time.Millisecond)
}

// parseTTL reads a ttl header value: decimal digits, at most
// math.MaxUint32 milliseconds (strconv.ParseUint(v, 10, 32)'s verdict,
// without its generality: it is read for every message that has one).
func parseTTL(v string) (uint64, bool) {
	if len(v) == hotpath.TTLWidth { // as a broker stamps every ttl it forwards
		return parseTTLWidth(v)
	}
	if v == "" {
		return 0, false
	}
	var ms uint64
	for i := 0; i < len(v); i++ {
		d := v[i] - '0'
		if d > 9 {
			return 0, false
		}
		if ms = ms*10 + uint64(d); ms > math.MaxUint32 {
			return 0, false
		}
	}
	return ms, true
}

// parseTTLWidth is parseTTL for hotpath.TTLWidth (10) digits: the first
// two one by one, the other eight in one word (a check that every byte is
// a digit, then three multiplies that join neighbours: pairs, fours,
// eight), rather than a multiply and a branch per digit.
func parseTTLWidth(v string) (uint64, bool) {
	_ = v[9]
	d0, d1 := v[0]-'0', v[1]-'0'
	x := uint64(v[2]) | uint64(v[3])<<8 | uint64(v[4])<<16 | uint64(v[5])<<24 |
		uint64(v[6])<<32 | uint64(v[7])<<40 | uint64(v[8])<<48 | uint64(v[9])<<56
	const (
		zeros = 0x3030303030303030 // '0' in every byte
		high  = 0xF0F0F0F0F0F0F0F0
	)
	// Every byte is 0x30-0x3F, and 0x30-0x39 once 6 is added to it.
	if d0 > 9 || d1 > 9 || x&high != zeros || (x+0x0606060606060606)&high != zeros {
		return 0, false
	}
	x -= zeros                                 // the digits, the first in the lowest byte
	x = (x*10 + x>>8) & 0x00FF00FF00FF00FF     // pairs
	x = (x*100 + x>>16) & 0x0000FFFF0000FFFF   // fours
	x = (x*10000 + x>>32) & 0x00000000FFFFFFFF // eight
	ms := (uint64(d0)*10+uint64(d1))*100_000_000 + x
	return ms, ms <= math.MaxUint32
}

// startUnder opens a call and queues m on the live connection while
// holding lock (discovery's or state's, which come before mu), then runs
// queued with the connection, still under lock: so what a part decides
// under its lock leaves in that order. While reconnecting it waits, as
// call does.
func (c *Client) startUnder(ctx context.Context, lock *sync.Mutex, m *wire.Message, deadline time.Time,
	onAnswer func(*wire.Message), queued func(*conn)) (*pending, error) {
	id := m.Value(wire.HeaderID)
	var stale *conn
	for {
		if err := c.awaitUp(ctx, nil, deadline, stale); err != nil {
			return nil, err
		}
		lock.Lock()
		p, err := c.register(nil, id, onAnswer)
		switch {
		case errors.Is(err, errNotConnected):
			stale = nil
		case err != nil:
			lock.Unlock()
			return nil, err
		case p.cn.out.Enqueue(m, deadline):
			queued(p.cn)
			lock.Unlock()
			return p, nil
		default:
			c.forget(id)
			if !p.cn.out.Closing() {
				lock.Unlock()
				return nil, errQueueFull
			}
			stale = p.cn
		}
		lock.Unlock()
	}
}
