package client

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

func edSign(k ed25519.PrivateKey, msg []byte) []byte { return ed25519.Sign(k, msg) }

// subscribersLocked returns the subscribers of channel: those of the
// channel itself, then those of every wildcard pattern matching it, each
// subscription once. Without patterns it is the stored slice itself.
func (c *Client) subscribersLocked(channel string) []*Subscription {
	subs := c.subs[channel]
	if len(c.subPats) == 0 {
		return subs
	}
	subs = slices.Clip(subs)
	for _, p := range c.subPats {
		if auth.Pattern(p).Match(channel) {
			subs = append(subs, c.subs[p]...)
		}
	}
	return subs
}

// deliverEvent hands an event to the node's subscribers through the
// executor and answers the broker's receipt: ACCEPTED once queued for
// dispatch, BACKPRESSURED when the dispatch queue is full, NO_SUBSCRIBER
// when nobody here listens.
func (c *Client) deliverEvent(cn *conn, m *wire.Message) {
	channel := m.Value(wire.HeaderCommand)
	c.mu.Lock()
	subs := c.subscribersLocked(channel) // copy-on-write: safe to use after unlock
	c.mu.Unlock()
	result := wire.NoSubscriber
	// The receipt must be queued before the callback can run: a callback
	// may close the client, and an event it handled must not read FAILED.
	var gate chan struct{}
	if len(subs) > 0 {
		deadline := ttlDeadline(m)
		msg := newMessage(m, Event, deadline)
		gate = make(chan struct{})
		result = wire.Backpressured
		if c.exec.Execute(func() { <-gate; c.runSubscribers(subs, msg) }) {
			result = wire.Accepted
		}
	}
	receipt := wire.New(wire.TypeResponse, wire.CmdReceipt).
		WithHeader(wire.HeaderReplyTo, m.Value(wire.HeaderID)).
		WithHeader(wire.HeaderResult, string(result))
	// The reader must never wait for room: a receipt the full queue
	// refuses is dropped, counted, and its sender reads TIMED_OUT.
	c.queueOrCount(cn, receipt, time.Time{}, &c.drops.receipts)
	if gate != nil {
		close(gate)
	}
}

// deliverStream hands a stream message to the subscribers, best effort:
// no receipt; a full dispatch queue drops it (counted in Dropped).
func (c *Client) deliverStream(cn *conn, v *hotpath.View, now *time.Time) {
	c.mu.Lock()
	subs := c.subscribersLocked(v.Value(wire.HeaderCommand))
	c.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	var deadline time.Time
	if ttl, ok := v.Get(wire.HeaderTTL); ok {
		// One clock read per batch of frames a read brought in: they
		// arrived together, and a clock read costs as much as the rest of
		// the delivery on some machines.
		if now.IsZero() {
			*now = time.Now()
			c.clock.Store(now.UnixNano())
		}
		deadline = deadlineFrom(ttl, *now)
	}
	cn.streams = append(cn.streams, streamItem{subs, messageFromView(v, Event, deadline)})
	if len(cn.streams) >= maxStreamBatch {
		c.flushStreams(cn)
	}
}

// streamItem is a stream message and the subscribers it was for.
type streamItem struct {
	subs []*Subscription
	msg  *Message
}

// maxStreamBatch bounds the stream messages handed to the executor as one
// task: the reader batches what one read brought in, so a burst costs one
// hand-off, not one per message.
const maxStreamBatch = 64

// flushStreams hands the batched stream messages to the executor as one
// task (in order). DispatchQueue still counts messages: those past it are
// dropped, counted, as is the whole batch when the executor refuses it.
func (c *Client) flushStreams(cn *conn) {
	if len(cn.streams) == 0 {
		return
	}
	batch := cn.streams
	cn.streams = make([]streamItem, 0, maxStreamBatch)
	if room := int64(c.opts.DispatchQueue) - c.streamsQueued.Load(); int64(len(batch)) > room {
		keep := max(0, room)
		c.drops.streams.Add(int64(len(batch)) - keep)
		batch = batch[:keep]
		if keep == 0 {
			return
		}
	}
	c.streamsQueued.Add(int64(len(batch)))
	if !c.exec.Execute(func() {
		for _, it := range batch {
			c.runStreamSubscribers(it.subs, it.msg)
			c.streamsQueued.Add(-1)
		}
	}) {
		c.streamsQueued.Add(-int64(len(batch)))
		c.drops.streams.Add(int64(len(batch)))
	}
}

// runStreamSubscribers runs the subscribers of a stream message with the
// client's context: a per-message deadline context (a timer each) would
// cost more than many stream messages; m.Deadline() still tells it.
func (c *Client) runStreamSubscribers(subs []*Subscription, msg *Message) {
	if !msg.deadline.IsZero() && msg.deadline.Before(c.readClock()) {
		return // expired while queued: never dispatched
	}
	for i, s := range subs {
		if s.active() {
			m := receiverCopy(msg, i, len(subs))
			c.protect(func() { s.h(c.ctx, m) })
		}
	}
}

// receiverCopy is the Message for the i-th of n subscribers: each gets one
// of its own (Message.Payload is the receiver's to keep or modify). The
// last gets msg itself, so a lone subscriber costs no copy; the others get
// copies made before msg is handed to anyone.
func receiverCopy(msg *Message, i, n int) *Message {
	if i == n-1 {
		return msg
	}
	return msg.copyForReceiver()
}

// readClock is the latest time the reader read the clock: a cheap "now"
// for expiry checks on the dispatch side, never later than the real one.
func (c *Client) readClock() time.Time {
	if ns := c.clock.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Now()
}

func (c *Client) runSubscribers(subs []*Subscription, msg *Message) {
	if !msg.deadline.IsZero() && time.Now().After(msg.deadline) {
		return // expired while queued: never dispatched
	}
	ctx, cancel := c.callbackContext(msg.deadline)
	defer cancel()
	for i, s := range subs {
		if s.active() {
			m := receiverCopy(msg, i, len(subs))
			c.protect(func() { s.h(ctx, m) })
		}
	}
}

func (c *Client) callbackContext(deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return context.WithCancel(c.ctx)
	}
	return context.WithDeadline(c.ctx, deadline)
}

// protect runs a callback, turning a panic into an error so one bad
// handler cannot take the process down.
func (c *Client) protect(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("callback panicked", "panic", r)
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	f()
	return nil
}

// deliverRequest runs the node's handler for the channel through the
// executor and sends its reply.
func (c *Client) deliverRequest(cn *conn, m *wire.Message) {
	channel := m.Value(wire.HeaderCommand)
	c.mu.Lock()
	reg := c.handlers[channel]
	c.mu.Unlock()
	if reg == nil {
		c.replyQueued(cn, m, wire.ResultNoHandler, "no handler for "+channel+" on "+c.Node())
		return
	}
	deadline := ttlDeadline(m)
	msg := newMessage(m, Request, deadline)
	if !c.exec.Execute(func() { c.runHandler(reg, m, msg, func(a *wire.Message) { c.sendReply(cn, a) }) }) {
		c.replyQueued(cn, m, wire.ResultOverload, c.Node()+" dispatch queue is full")
	}
}

// runHandler runs a request's handler on an executor worker and gives
// the response to respond: sendReply for a request from the wire, the
// waiting caller for a loopback request.
func (c *Client) runHandler(reg *Registration, req *wire.Message, msg *Message, respond func(*wire.Message)) {
	fail := func(kind wire.Result, rc wire.RC, text string) {
		respond(replyMessage(req, rc, kind, text, nil))
	}
	if !msg.deadline.IsZero() && time.Now().After(msg.deadline) {
		return // the caller gave up while this waited: never dispatched
	}
	if !reg.active() {
		fail(wire.ResultNoHandler, wire.RCFailure, "handler withdrawn")
		return
	}
	ctx, cancel := c.callbackContext(msg.deadline)
	defer cancel()
	var (
		payload []byte
		herr    error
	)
	if perr := c.protect(func() { payload, herr = reg.h(ctx, msg) }); perr != nil {
		fail(wire.ResultHandler, wire.RCFailure, perr.Error())
		return
	}
	if herr != nil {
		rc, text := wire.RCError, herr.Error()
		var he *HandlerError
		if errors.As(herr, &he) {
			rc, text = max(he.RC, wire.RCError), he.Text
		}
		fail(wire.ResultHandler, rc, text)
		return
	}
	if n, limit := len(payload), c.conn().welcome.MaxPayload; n > limit {
		fail(wire.ResultHandler, wire.RCFailure, fmt.Sprintf("reply of %d bytes exceeds the limit of %d", n, limit))
		return
	}
	respond(replyMessage(req, wire.RCSuccess, "", "", payload))
}

// replyQueued answers a request with a failure from the reader goroutine,
// which must never block on the socket: always through the queue, and an
// answer the full queue refuses is dropped, counted (the requester times
// out).
func (c *Client) replyQueued(cn *conn, req *wire.Message, kind wire.Result, text string) {
	c.queueOrCount(cn, replyMessage(req, wire.RCFailure, kind, text, nil), time.Time{}, &c.drops.replies)
}

// sendReply sends a handler's response on the connection the request
// came on: once that one is lost the requester has its DISCONNECT, and
// the reply is dropped with its queue, never sent on another.
func (c *Client) sendReply(cn *conn, m *wire.Message) {
	// Replies leave from the handler's worker (never a network goroutine):
	// write through when the connection is idle.
	if cn.out.WriteThrough(m, time.Time{}) {
		return
	}
	// Dropped, counted, when the queue is full: the handler has returned
	// and nobody is left to tell but the requester, whose deadline ends its
	// wait; a worker waiting for room would stall the dispatch pool.
	c.queueOrCount(cn, m, time.Time{}, &c.drops.replies)
}

func replyMessage(req *wire.Message, rc wire.RC, kind wire.Result, text string, payload []byte) *wire.Message {
	m := wire.New(wire.TypeResponse, req.Value(wire.HeaderCommand)).
		WithHeader(wire.HeaderID, newID()).
		WithHeader(wire.HeaderReplyTo, req.Value(wire.HeaderID)).
		WithHeader(wire.HeaderTo, req.Value(wire.HeaderFrom)).
		WithHeader(wire.HeaderRC, strconv.Itoa(int(rc))).
		WithBody(payload)
	if kind != "" {
		m.Set(wire.HeaderResult, string(kind))
		m.Set(wire.HeaderError, text)
	}
	return m
}
