package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/wire"
)

// Scope is what one plugin owns on the shared connection. Closing it
// revokes only its registrations and fails only its open calls; handles
// kept after Close cannot start new work.
type Scope struct {
	// Set once by Client.Scope; read-only after.
	c     *Client
	label string
	done  chan struct{} // closed when the scope closes: its open calls return ErrScopeClosed

	// closed is set once, under mu (with done closed alongside), and read
	// anywhere without a lock: under Client.mu, which may not take mu.
	closed atomic.Bool

	mu   sync.Mutex // guards subs and regs; held while work starts (open)
	subs []*Subscription
	regs []*Registration
}

// Scope returns a new scope labelled for logs (a plugin's name).
func (c *Client) Scope(label string) *Scope {
	s := &Scope{c: c, label: label, done: make(chan struct{})}
	c.mu.Lock()
	if c.closing() {
		s.closed.Store(true)
		close(s.done)
	} else {
		c.scopes[s] = struct{}{}
	}
	c.mu.Unlock()
	return s
}

// Label is the scope's label.
func (s *Scope) Label() string { return s.label }

// Channel returns the named channel in this scope. The name is checked
// here, once, and a malformed one refuses every use of the channel.
func (s *Scope) Channel(name string) *Channel {
	return &Channel{s: s, name: name, nameErr: auth.ValidChannel(name)}
}

// Close revokes the scope's subscriptions and handler registrations and
// fails its open calls with ErrScopeClosed. Other scopes are unaffected.
func (s *Scope) Close() error {
	subs, regs := s.markClosed()
	for _, sub := range subs {
		sub.Close()
	}
	for _, r := range regs {
		r.Close()
	}
	s.c.mu.Lock()
	delete(s.c.scopes, s)
	s.c.mu.Unlock()
	return nil
}

// markClosed closes the scope to new work and returns what it owned.
func (s *Scope) markClosed() ([]*Subscription, []*Registration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, nil
	}
	s.closed.Store(true)
	close(s.done)
	subs, regs := s.subs, s.regs
	s.subs, s.regs = nil, nil
	return subs, regs
}

// open runs f under the scope's lock if the scope is open, so the scope
// cannot close half-way through f (f may take Client.mu).
func (s *Scope) open(f func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return ErrScopeClosed
	}
	f()
	return nil
}

// EventHandler receives events. ctx ends at the sender's deadline or when
// the client closes.
type EventHandler func(ctx context.Context, m *Message)

// RequestHandler answers requests: its payload becomes the reply. An
// error fails the request (HANDLER_FAILED) with RCError, or with the return
// code of a *HandlerError.
type RequestHandler func(ctx context.Context, m *Message) ([]byte, error)

// Subscription is one registered event handler.
type Subscription struct {
	ch     *Channel     // set once; read-only after
	h      EventHandler // set once; read-only after
	closed atomic.Bool  // set once, by Close
}

func (s *Subscription) active() bool { return !s.closed.Load() }

// Subscribe registers h for events on the channel. Several subscribers per
// node are allowed. The broker checks the receive permission; a refusal is
// a *RequestError matching ErrRejected, and no verdict before ctx's
// deadline one matching ErrTimeout. Refusals made before asking are plain
// errors (see Channel).
//
// The channel's name may be a wildcard pattern, in the grammar of the
// permissions file: "orders.*" (one token), "orders.>" (one or more),
// "myplugin:*" (every channel of a namespace), "*:events", ">" (every
// channel). h then receives the events of every matching channel
// (Message.Channel names it) that the principal may receive; a
// subscription on a channel and one on a pattern matching it each get the
// event once. A pattern is only for Subscribe: the other calls refuse it
// as a malformed channel.
func (ch *Channel) Subscribe(ctx context.Context, h EventHandler) (*Subscription, error) {
	return ch.subscribe(ctx, "", h)
}

// QueueSubscribe is Subscribe as a member of queue (a label): each event
// or stream message on the channel goes to one member of each queue, in
// turn, and to every subscriber outside a queue as before
// (docs/messaging.md#queue-subscriptions). A publication still has one
// result per candidate node; a member not given the event reads
// NO_SUBSCRIBER. On one node every subscription of a channel belongs to
// the same queue, or to none. On a bus of brokers one member of each
// queue is chosen across every broker.
func (ch *Channel) QueueSubscribe(ctx context.Context, queue string, h EventHandler) (*Subscription, error) {
	if err := wire.ValidLabel(queue); err != nil {
		return nil, fmt.Errorf("client: queue name: %w", err)
	}
	return ch.subscribe(ctx, queue, h)
}

func (ch *Channel) subscribe(ctx context.Context, queue string, h EventHandler) (*Subscription, error) {
	if err := auth.ValidSubscription(ch.name); err != nil {
		return nil, err
	}
	if err := ch.usable(); err != nil {
		return nil, err
	}
	c := ch.s.c
	sub := &Subscription{ch: ch, h: h}
	var (
		p     *pending
		ctlID string
		cerr  error
		w     *regWait
	)
	deadline := c.deadline(ctx)
	err := ch.openLive(ctx, deadline, "subscribe "+ch.name, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.subs[ch.name]) > 0 && c.subQueue[ch.name] != queue {
			cerr = fmt.Errorf("client: %s is subscribed on this node %s already", ch.name, queueWords(c.subQueue[ch.name]))
			return false
		}
		if len(c.subs[ch.name]) == 0 {
			// The first subscriber registers the node with the broker; the
			// request is queued under c.mu so it cannot overtake a withdrawal.
			m := subscribeMessage(ch.name, queue)
			if c.subQueue == nil {
				c.subQueue = map[string]string{}
			}
			if queue != "" {
				c.subQueue[ch.name] = queue
			} else {
				delete(c.subQueue, ch.name)
			}
			if p, cerr = c.startLocked(nil, m, deadline); cerr != nil {
				return errors.Is(cerr, errNotConnected)
			}
			ctlID = m.Value(wire.HeaderID)
			c.subReg[ch.name] = &regWait{done: make(chan struct{})}
		}
		w = c.subReg[ch.name]
		if len(c.subs[ch.name]) == 0 && auth.IsPattern(ch.name) {
			c.subPats = append(slices.Clip(c.subPats), ch.name)
		}
		c.subs[ch.name] = append(slices.Clip(c.subs[ch.name]), sub) // copy-on-write for deliverEvent
		ch.s.subs = append(ch.s.subs, sub)
		return false
	})
	if err != nil {
		return nil, err
	}
	switch {
	case errors.Is(cerr, errQueueFull): // the broker's answer would say OVERLOAD too
		return nil, callError(cerr)
	case cerr != nil:
		return nil, cerr
	case p != nil:
		a, werr := c.await(ctx, p, ctlID, deadline)
		w.err = controlResult(a, werr)
		close(w.done)
	}
	// Every subscriber of this registration gets the broker's verdict.
	select {
	case <-w.done:
	case <-ctx.Done():
		// As when this subscriber's own registration gets no verdict in time.
		sub.Close()
		return nil, fmt.Errorf("subscribe %s: %w", ch.name, callError(errDeadline))
	case <-c.done:
		sub.Close()
		return nil, c.Err()
	}
	if w.err != nil {
		sub.Close()
		return nil, fmt.Errorf("subscribe %s: %w", ch.name, w.err)
	}
	return sub, nil
}

func queueWords(q string) string {
	if q == "" {
		return "outside any queue"
	}
	return "in queue " + q
}

// regWait is the broker's verdict on a channel's subscription, shared by
// the subscribers that join while it is pending.
type regWait struct {
	done chan struct{}
	err  error // set before done is closed
}

// Close withdraws the subscription.
func (s *Subscription) Close() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	c, name := s.ch.s.c, s.ch.name
	c.mu.Lock()
	defer c.mu.Unlock()
	left := slices.DeleteFunc(slices.Clone(c.subs[name]), func(x *Subscription) bool { return x == s })
	if len(left) == 0 {
		if _, ok := c.subs[name]; ok && auth.IsPattern(name) {
			c.subPats = slices.DeleteFunc(slices.Clone(c.subPats), func(p string) bool { return p == name })
		}
		delete(c.subs, name)
		delete(c.subReg, name)
		delete(c.subQueue, name)
		if !c.closing() {
			c.withdrawLocked(wire.CmdUnsub, name)
		}
	} else {
		c.subs[name] = left
	}
}

// Registration is the node's request handler for one channel.
type Registration struct {
	ch     *Channel       // set once; read-only after
	h      RequestHandler // set once; read-only after
	closed atomic.Bool    // set once, by Close
}

func (r *Registration) active() bool { return !r.closed.Load() }

// Handle registers h as the node's one request handler for the channel; a
// second registration on the same node fails with ErrHandlerExists. The
// broker checks the receive permission (a refusal is a *RequestError
// matching ErrRejected). Refusals made before asking are plain errors (see
// Channel).
func (ch *Channel) Handle(ctx context.Context, h RequestHandler) (*Registration, error) {
	if err := auth.ValidChannel(ch.name); err != nil {
		return nil, err
	}
	if err := ch.usable(); err != nil {
		return nil, err
	}
	c := ch.s.c
	reg := &Registration{ch: ch, h: h}
	var (
		p      *pending
		ctlID  string
		cerr   error
		exists bool
	)
	deadline := c.deadline(ctx)
	err := ch.openLive(ctx, deadline, "handle "+ch.name, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.handlers[ch.name] != nil {
			exists = true
			return false
		}
		m := controlMessage(wire.CmdHandle, ch.name)
		if p, cerr = c.startLocked(nil, m, deadline); cerr != nil {
			return errors.Is(cerr, errNotConnected)
		}
		ctlID = m.Value(wire.HeaderID)
		c.handlers[ch.name] = reg
		ch.s.regs = append(ch.s.regs, reg)
		return false
	})
	if err != nil {
		return nil, err
	}
	switch {
	case exists:
		return nil, ErrHandlerExists
	case errors.Is(cerr, errQueueFull):
		return nil, callError(cerr)
	case cerr != nil:
		return nil, cerr
	}
	a, werr := c.await(ctx, p, ctlID, deadline)
	if err := controlResult(a, werr); err != nil {
		reg.Close()
		return nil, fmt.Errorf("handle %s: %w", ch.name, err)
	}
	return reg, nil
}

// Close withdraws the handler.
func (r *Registration) Close() {
	if !r.closed.CompareAndSwap(false, true) {
		return
	}
	c, name := r.ch.s.c, r.ch.name
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handlers[name] == r {
		delete(c.handlers, name)
		if !c.closing() {
			c.withdrawLocked(wire.CmdUnhandle, name)
		}
	}
}

// withdrawLocked queues a bus.unsub or bus.unhandle without waiting for it;
// c.mu is held so the broker sees registrations in the order they were
// decided, which is also why it cannot wait for room. A withdrawal the
// full queue refuses is dropped, counted (Stats.DroppedWithdrawals says
// what follows): Close has no error to return it in.
//
// Without a live connection there is nothing to withdraw: a reconnect
// restores only what is registered then.
func (c *Client) withdrawLocked(cmd, channel string) {
	if cn := c.cur.Load(); cn != nil {
		c.queueOrCount(cn, controlMessage(cmd, channel), time.Time{}, &c.drops.withdrawals)
	}
}

// openLive runs f as Scope.open does, once a connection is live. f
// reports true when it found none after all (startLocked's
// errNotConnected, having registered nothing): it runs again when the next
// connection is live, within deadline.
func (ch *Channel) openLive(ctx context.Context, deadline time.Time, what string, f func() (retry bool)) error {
	c := ch.s.c
	var stale *conn
	for {
		if err := c.awaitUp(ctx, ch.s, deadline, stale); err != nil {
			return upError(what, err)
		}
		retry := false
		err := ch.s.open(func() { retry = f() })
		if !retry {
			return err
		}
		stale = c.cur.Load() // nil, or a connection whose queue is closing
	}
}

// upError is how Subscribe and Handle report that no connection came back
// within their deadline (a *RequestError of kind TIMEOUT), or why the
// client or scope can take no work.
func upError(what string, err error) error {
	if errors.Is(err, errUnreachable) {
		return fmt.Errorf("%s: %w", what, callError(err))
	}
	return err
}
