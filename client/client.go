package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/transport"
	"busbar/wire"
)

// Client is one process's connection to a broker. It is safe for
// concurrent use.
//
// Its state is split by feature, each part with its own lock (doc.go has
// the lock order): messaging and the call table here under mu, discovery
// (registry watches) in discovery, replicated state in state.
type Client struct {
	// Set once in Connect before the loops start; read-only after.
	opts    Options
	log     *slog.Logger
	nc      net.Conn
	out     *sendq.Queue // safe for concurrent use; its lock is taken last
	welcome wire.Welcome
	nonce   []byte // the broker's bus.info nonce: a relay receive proof signs it
	exec    Executor
	pool    *pool           // the default executor, owned; nil when the caller gave one
	ctx     context.Context // cancelled by shutdown: callbacks' contexts derive from it
	cancel  context.CancelFunc
	done    chan struct{} // closed by shutdown, once

	// end is why the connection ends: nil while it is up; set (not
	// closed) when the broker said why it is about to close it; closed
	// once shutdown has begun. Stored under mu, so registering a call and
	// shutting down exclude each other; loaded anywhere without a lock.
	end atomic.Pointer[ending]

	// Messaging and the call table: guarded by mu. Control messages
	// queued under mu (bus.sub, bus.unsub, bus.handle, bus.unhandle)
	// leave in the order they were decided.
	mu       sync.Mutex
	calls    map[string]*pending // every open call: messaging, discovery and state
	scopes   map[*Scope]struct{}
	subs     map[string][]*Subscription // copy-on-write: a slice read under mu may be used after
	subReg   map[string]*regWait        // the broker's verdict on the current subscriber set of a channel
	handlers map[string]*Registration

	discovery discovery   // registry watches: its own lock
	state     stateClient // replicated state's watches and clocks: its own locks

	durable atomic.Pointer[DurableSession] // the relay receive session, if any (durable.go)

	// Owned by the read loop.
	streams []streamItem // stream messages not yet handed to the executor

	// Atomics, shared without a lock.
	active        atomic.Bool  // a frame arrived since the heartbeat's last tick: set by the reader, swapped by heartbeat
	clock         atomic.Int64 // unix ns of the reader's latest clock read (see readClock); written by the reader
	streamsQueued atomic.Int64 // stream messages handed to the executor and not yet run
	drops         drops        // what was dropped rather than block, by reason (Stats)

	loops sync.WaitGroup // the writer, reader and heartbeat goroutines
}

// ending is why the connection ends (Client.end).
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
// All its fields are set once by registerLocked; read-only after. Whoever
// takes it out of Client.calls (under mu) sends the one answer.
type pending struct {
	answer chan *wire.Message // 1-slot; nil message: the connection ended
	scope  *Scope             // nil for control calls
	// onAnswer, when set, runs on the reader with the answer before
	// anything read after it is handled (a watch starts there).
	onAnswer func(*wire.Message)
}

// Connect dials the broker, performs the handshake and returns a
// registered client.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	opts.setDefaults()
	if err := auth.ValidNodeName(opts.Node); err != nil {
		return nil, err
	}
	if opts.IID != "" {
		if err := wire.ValidIID(opts.IID); err != nil {
			return nil, err
		}
	}
	nc, err := dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	c := &Client{
		opts: opts, log: opts.Logger.With("node", opts.Node), nc: nc,
		calls: map[string]*pending{}, subs: map[string][]*Subscription{}, subReg: map[string]*regWait{},
		handlers: map[string]*Registration{}, scopes: map[*Scope]struct{}{},
		done: make(chan struct{}),
	}
	c.discovery.init(c)
	c.state.init(c)
	r := wire.NewReader(nc)
	if err := c.handshake(ctx, r); err != nil {
		_ = nc.Close()
		return nil, err
	}
	c.exec = opts.Executor
	if c.exec == nil {
		c.pool = newPool(opts.Workers, opts.DispatchQueue)
		c.exec = c.pool
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.out = sendq.New(nc, sendq.Limits{MaxBytes: opts.MaxQueueBytes, MaxMessages: opts.MaxQueueMessages, WriteTimeout: opts.WriteTimeout})
	c.loops.Add(3)
	go func() { defer c.loops.Done(); _ = c.out.Run() }()
	go func() { defer c.loops.Done(); c.readLoop(r) }()
	go func() { defer c.loops.Done(); c.heartbeat() }()
	return c, nil
}

func dial(ctx context.Context, opts Options) (net.Conn, error) {
	if opts.Dial != nil {
		return opts.Dial(ctx)
	}
	ep, err := transport.ParseEndpoint(opts.Server)
	if err != nil {
		return nil, err
	}
	return transport.Dial(ctx, ep, opts.TLS)
}

// handshake reads bus.info, sends bus.hello and reads the welcome, under
// ctx's deadline (or handshakeTimeout).
func (c *Client) handshake(ctx context.Context, r *wire.Reader) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handshakeTimeout)
	}
	_ = c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Now()) })
	defer stop()

	m, err := r.ReadMessage()
	if err != nil {
		return fmt.Errorf("client: reading broker info: %w", ctxErr(ctx, err))
	}
	if m.Value(wire.HeaderCommand) == wire.CmdError { // refused before the handshake
		return refusedError(m)
	}
	var info wire.Info
	if m.Value(wire.HeaderCommand) != wire.CmdInfo || json.Unmarshal(m.Body(), &info) != nil {
		return fmt.Errorf("client: broker did not start with %s", wire.CmdInfo)
	}
	c.nonce = info.Nonce
	hello := wire.Hello{Node: c.opts.Node, IID: c.opts.IID, Principal: c.opts.Credential.Principal, Secret: c.opts.Credential.Secret}
	if c.opts.PrivateKey != nil {
		hello.Secret = ""
		hello.Signature = edSign(c.opts.PrivateKey, auth.SignedMessage(info.Nonce, c.opts.Node))
	}
	compatible := info.Protocol == wire.ProtocolVersion
	if !compatible {
		// Still say hello, so the broker can log the mismatch too, but
		// never hand a secret to a peer that speaks another protocol.
		hello = wire.Hello{Node: c.opts.Node}
	}
	body, _ := json.Marshal(hello)
	req := wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).
		WithHeader(wire.HeaderID, newID()).WithBody(body)
	w := wire.NewWriter(c.nc)
	if err := w.WriteMessage(req); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("client: sending hello: %w", ctxErr(ctx, err))
	}
	resp, err := r.ReadMessage()
	if !compatible { // whatever the broker answered
		return fmt.Errorf("%w: broker speaks %q, this client %q", ErrIncompatible, info.Protocol, wire.ProtocolVersion)
	}
	if err != nil {
		return fmt.Errorf("client: reading welcome: %w", ctxErr(ctx, err))
	}
	if resp.Value(wire.HeaderCommand) == wire.CmdError { // closed while logging in
		return refusedError(resp)
	}
	if rc := wire.ResponseRC(resp); rc.IsError() {
		text := resp.Value(wire.HeaderError)
		switch wire.Result(resp.Value(wire.HeaderResult)) {
		case wire.ResultVersion:
			return fmt.Errorf("%w: %s", ErrIncompatible, text)
		case wire.ResultAuth:
			return fmt.Errorf("%w: %s", ErrAuth, text)
		}
		return fmt.Errorf("client: handshake refused: %s", text)
	}
	if err := json.Unmarshal(resp.Body(), &c.welcome); err != nil {
		return fmt.Errorf("client: malformed welcome: %w", err)
	}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

// refusedError is the error for a bus.error the broker sent instead of
// serving the connection: at capacity, too many logging in, a hello too
// large.
func refusedError(m *wire.Message) error {
	return fmt.Errorf("%w: %s: %s", ErrRefused, m.Value(wire.HeaderResult), m.Value(wire.HeaderError))
}

// ctxErr prefers the context's error when it caused the I/O error.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Node is the registered node name.
func (c *Client) Node() string { return c.welcome.Node }

// Addr is the node's address, "<node>.bus".
func (c *Client) Addr() string { return c.welcome.Node + ".bus" }

// IID is this client instance's id, as the broker registered it.
func (c *Client) IID() string { return c.welcome.IID }

// Epoch increments each time this node name connects to the broker.
func (c *Client) Epoch() uint64 { return c.welcome.Epoch }

// Broker is the broker's node name.
func (c *Client) Broker() string { return c.welcome.Broker }

// Done is closed when the connection has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended, or nil while it is up.
func (c *Client) Err() error {
	if e := c.end.Load(); e != nil {
		return e.err
	}
	return nil
}

// Close ends the connection: every scope closes, open calls fail, and Close
// waits for the connection's goroutines and for running callbacks (whose
// contexts are cancelled) to return. A callback must therefore not call
// Close itself (it would wait for itself); it may start `go c.Close()`.
//
// A client whose connection ended (Done is closed) does not reconnect:
// messaging is live-only, so the application decides what to redo and
// calls Connect again; the broker gives the new connection the next epoch.
func (c *Client) Close() error {
	c.shutdown(ErrClosed)
	c.loops.Wait()
	if c.pool != nil {
		c.pool.close()
	}
	return nil
}

// shutdown ends the connection once, failing every open call.
func (c *Client) shutdown(why error) {
	c.mu.Lock()
	if c.closing() {
		c.mu.Unlock()
		return
	}
	c.end.Store(&ending{err: why, closed: true})
	calls := c.calls
	c.calls = map[string]*pending{}
	scopes := make([]*Scope, 0, len(c.scopes))
	for s := range c.scopes {
		scopes = append(scopes, s)
	}
	c.mu.Unlock()
	for _, p := range calls {
		p.answer <- nil
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
	c.out.Close(nil)
	c.cancel()
	close(c.done)
}

// readLoop reads frames until the connection ends.
func (c *Client) readLoop(r *wire.Reader) {
	var (
		v   hotpath.View
		now time.Time // when the frames in the buffer were read; zero once it drains
	)
	for {
		if !r.FrameReady() {
			now = time.Time{}
		}
		frame, err := r.ReadFrame()
		if err == nil {
			err = hotpath.ParseView(frame, &v)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				c.shutdown(c.endReason(err))
				return
			}
			c.log.Warn("malformed frame from broker", "err", err)
			continue
		}
		c.active.Store(true) // the heartbeat loop turns this into lastRead
		if v.IsHeartbeat() {
			continue
		}
		if v.Value(wire.HeaderType) == wire.TypeStream { // the hot path: no decode
			c.deliverStream(&v, &now)
			if !r.FrameReady() {
				c.flushStreams() // the next read may wait: hand the batch over first
			}
			continue
		}
		c.flushStreams() // keep stream messages before what follows them
		m, err := v.Message()
		if err != nil {
			continue // cannot happen: the view parsed
		}
		c.dispatch(m)
	}
}

// endReason keeps the broker's stated reason (bus.error) over the I/O error.
func (c *Client) endReason(err error) error {
	if e := c.end.Load(); e != nil {
		return e.err
	}
	return fmt.Errorf("%w: %v", ErrDisconnect, err)
}

func (c *Client) dispatch(m *wire.Message) {
	switch m.Value(wire.HeaderType) {
	case wire.TypeResponse:
		c.answer(m)
	case wire.TypeEvent:
		switch m.Value(wire.HeaderCommand) {
		case wire.CmdError:
			c.brokerSays(m)
		case wire.CmdGoodbye:
			c.log.Info("broker is shutting down")
		case wire.CmdService:
			c.discovery.serviceEvent(m)
		case wire.CmdStateDelta:
			c.state.delta(m)
		case wire.CmdStateReset:
			c.state.reset(m)
		case wire.CmdDurableDeliver:
			c.durableDeliver(m)
		default:
			c.deliverEvent(m)
		}
	case wire.TypeRequest:
		c.deliverRequest(m)
	}
}

// brokerSays records a bus.error: fatal ones precede the broker's close.
func (c *Client) brokerSays(m *wire.Message) {
	res, text := m.Value(wire.HeaderResult), m.Value(wire.HeaderError)
	c.log.Warn("broker reported an error", "result", res, "error", text)
	if wire.Result(res) == wire.ResultMalformed {
		return // the connection stays up
	}
	c.mu.Lock()
	if c.end.Load() == nil {
		c.end.Store(&ending{err: fmt.Errorf("%w: broker closed the connection: %s: %s", ErrDisconnect, res, text)})
	}
	c.mu.Unlock()
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
		p.answer <- m
	}
}

// heartbeat keeps the lease: it sends a heartbeat after HeartbeatMS of
// silence, and ends the connection when the broker has been silent for
// LeaseMS.
func (c *Client) heartbeat() {
	interval := time.Duration(c.welcome.HeartbeatMS) * time.Millisecond
	lease := time.Duration(c.welcome.LeaseMS) * time.Millisecond
	if interval <= 0 || lease <= 0 {
		return
	}
	t := time.NewTicker(interval / 4)
	defer t.Stop()
	lastRead := time.Now() // the last tick that saw a frame; owned here
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			if c.active.Swap(false) {
				lastRead = now
			}
			if now.Sub(lastRead) > lease {
				c.shutdown(fmt.Errorf("%w: broker silent for %v", ErrDisconnect, lease))
				return
			}
			if now.Sub(c.out.LastWrite()) >= interval {
				// Dropped, counted, when the queue is full: frames are then
				// waiting to be written, which tells the broker as much, and
				// a writer that cannot write them ends the connection
				// (WriteTimeout).
				c.queueOrCount(wire.Empty(), time.Time{}, &c.drops.heartbeats)
			}
		}
	}
}

// call sends m and registers for its answer; it returns the answer, or nil
// and why none came.
func (c *Client) call(ctx context.Context, s *Scope, m *wire.Message, deadline time.Time) (*wire.Message, error) {
	id := m.Value(wire.HeaderID)
	p, err := c.register(s, id, nil)
	if err != nil {
		return nil, err
	}
	// The caller is not a network goroutine, so it may write itself when
	// the connection is idle: one hand-off less per call.
	if !c.out.WriteThrough(m, deadline) && !c.out.Enqueue(m, deadline) {
		c.forget(id)
		return nil, errQueueFull
	}
	return c.await(ctx, p, id, deadline)
}

// startLocked registers a call and queues its message; c.mu is held, so
// messages decided under the lock leave in that order.
func (c *Client) startLocked(s *Scope, m *wire.Message, deadline time.Time) (*pending, error) {
	id := m.Value(wire.HeaderID)
	p, err := c.registerLocked(s, id, nil)
	if err != nil {
		return nil, err
	}
	if !c.out.Enqueue(m, deadline) {
		delete(c.calls, id)
		return nil, errQueueFull
	}
	return p, nil
}

// register opens a call waiting for the answer to id (see registerLocked).
// Discovery and state register their calls here, before they take their
// own lock, so that lock and mu are never held together.
func (c *Client) register(s *Scope, id string, onAnswer func(*wire.Message)) (*pending, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registerLocked(s, id, onAnswer)
}

// registerLocked opens a call waiting for the answer to id; onAnswer, if
// not nil, runs on the reader with the answer. A call cannot open once
// shutdown has begun (it fails with Err) or on a closed scope.
func (c *Client) registerLocked(s *Scope, id string, onAnswer func(*wire.Message)) (*pending, error) {
	if e := c.end.Load(); e != nil && e.closed {
		return nil, e.err
	}
	if s != nil && s.closed.Load() {
		return nil, ErrScopeClosed
	}
	p := &pending{answer: make(chan *wire.Message, 1), scope: s, onAnswer: onAnswer}
	c.calls[id] = p
	return p, nil
}

// await waits for a started call's answer.
func (c *Client) await(ctx context.Context, p *pending, id string, deadline time.Time) (*wire.Message, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var sdone <-chan struct{}
	if p.scope != nil {
		sdone = p.scope.done
	}
	select {
	case a := <-p.answer:
		if a == nil {
			return nil, c.Err()
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

var (
	errQueueFull = errors.New("client: outbound queue full")
	errDeadline  = errors.New("client: deadline passed")
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
func ttlDeadline(m *wire.Message) time.Time {
	v, ok := m.Get(wire.HeaderTTL)
	if !ok {
		return time.Time{}
	}
	return deadlineFrom(v, time.Now())
}

// deadlineFrom is now plus a ttl header value (zero when malformed).
func deadlineFrom(v string, now time.Time) time.Time {
	ms, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return time.Time{}
	}
	return now.Add(time.Duration(ms) * time.Millisecond)
}
