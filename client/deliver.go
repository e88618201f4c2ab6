package client

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
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
		if c.execute(func() { <-gate; c.runSubscribers(subs, msg) }) {
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
func (c *Client) deliverStream(cn *conn, v *hotpath.View, now *hotpath.Instant) {
	c.mu.Lock()
	subs := c.subscribersLocked(v.Value(wire.HeaderCommand))
	c.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	var deadline hotpath.Instant
	if ttl, ok := v.Get(wire.HeaderTTL); ok {
		deadline = deadlineFrom(ttl, c.batchNow(now))
	}
	cn.streams = append(cn.streams, streamItem{subs, messageFromView(v, Event, deadline)})
	if len(cn.streams) >= maxStreamBatch {
		c.flushStreams(cn)
	}
}

// batchNow is when the frames in the reader's buffer were read: one clock
// read per batch of frames a read brought in (now is zero until then), as
// they arrived together, and a clock read costs as much as the rest of a
// delivery on some machines.
func (c *Client) batchNow(now *hotpath.Instant) hotpath.Instant {
	if now.IsZero() {
		*now = hotpath.Now()
		c.clock.Store(int64(*now))
	}
	return *now
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
	// The batch leaves in a pooled holder, whose empty slice the reader
	// takes in exchange.
	sb := streamBatches.Get().(*streamBatch)
	sb.items, cn.streams = cn.streams, sb.items[:0]
	if room := int64(c.opts.DispatchQueue) - c.streamsQueued.Load(); int64(len(sb.items)) > room {
		keep := max(0, room)
		c.drops.streams.Add(int64(len(sb.items)) - keep)
		clear(sb.items[keep:])
		sb.items = sb.items[:keep]
		if keep == 0 {
			sb.release()
			return
		}
	}
	n := int64(len(sb.items))
	c.streamsQueued.Add(n)
	if !c.execute(func() {
		for _, it := range sb.items {
			c.runStreamSubscribers(it.subs, it.msg)
			c.streamsQueued.Add(-1)
		}
		sb.release()
	}) {
		c.streamsQueued.Add(-n)
		c.drops.streams.Add(n)
		sb.release()
	}
}

// streamBatch holds a batch of stream messages on its way to the
// executor. Batches are reused: a fresh slice per read would be a 2 KiB
// allocation for every few messages, and the collector runs once per so
// many bytes allocated.
type streamBatch struct{ items []streamItem }

var streamBatches = sync.Pool{New: func() any { return &streamBatch{items: make([]streamItem, 0, maxStreamBatch)} }}

// release gives back a batch that was run or dropped, cleared so that the
// pool holds on to no message.
func (sb *streamBatch) release() {
	clear(sb.items)
	sb.items = sb.items[:0]
	streamBatches.Put(sb)
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
func (c *Client) readClock() hotpath.Instant {
	if i := c.clock.Load(); i != 0 {
		return hotpath.Instant(i)
	}
	return hotpath.Now()
}

func (c *Client) runSubscribers(subs []*Subscription, msg *Message) {
	if !msg.deadline.IsZero() && msg.deadline.Before(hotpath.Now()) {
		return // expired while queued: never dispatched
	}
	ctx := c.callbackContext(msg.deadline.Time())
	defer ctx.release()
	for i, s := range subs {
		if s.active() {
			m := receiverCopy(msg, i, len(subs))
			c.protect(func() { s.h(ctx, m) })
		}
	}
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

// outcome is what a request's handler answered: a reply's rc, payload,
// and for a failure its kind and text.
type outcome struct {
	rc      wire.RC
	kind    wire.Result
	text    string
	payload []byte
}

// failed is the outcome of a request that failed before or in its handler.
func failed(kind wire.Result, rc wire.RC, text string) outcome {
	return outcome{rc: rc, kind: kind, text: text}
}

// runHandler runs a request's handler on an executor worker and returns
// its outcome, or false when no reply is due (the caller gave up while it
// waited).
func (c *Client) runHandler(reg *Registration, msg *Message) (outcome, bool) {
	if !msg.deadline.IsZero() && msg.deadline.Before(hotpath.Now()) {
		return outcome{}, false // the caller gave up while this waited: never dispatched
	}
	if !reg.active() {
		return failed(wire.ResultNoHandler, wire.RCFailure, "handler withdrawn"), true
	}
	ctx := c.callbackContext(msg.deadline.Time())
	defer ctx.release()
	var (
		payload []byte
		herr    error
	)
	if perr := c.protect(func() { payload, herr = reg.h(ctx, msg) }); perr != nil {
		return failed(wire.ResultHandler, wire.RCFailure, perr.Error()), true
	}
	if herr != nil {
		rc, text := wire.RCError, herr.Error()
		var he *HandlerError
		if errors.As(herr, &he) {
			rc, text = max(he.RC, wire.RCError), he.Text
		}
		return failed(wire.ResultHandler, rc, text), true
	}
	if n, limit := len(payload), c.conn().welcome.MaxPayload; n > limit {
		return failed(wire.ResultHandler, wire.RCFailure, fmt.Sprintf("reply of %d bytes exceeds the limit of %d", n, limit)), true
	}
	return outcome{rc: wire.RCSuccess, payload: payload}, true
}

// replyQueued answers a request with a failure from the reader goroutine,
// which must never block on the socket: always through the queue, and an
// answer the full queue refuses is dropped, counted (the requester times
// out). The strings must not alias the read buffer.
func (c *Client) replyQueued(cn *conn, command, reqID, from string, kind wire.Result, text string) {
	c.queueOrCount(cn, replyMessage(command, reqID, from, failed(kind, wire.RCFailure, text)), time.Time{}, &c.drops.replies)
}

// replyMessage is the response to request reqID on command from from.
func replyMessage(command, reqID, from string, o outcome) *wire.Message {
	m := wire.New(wire.TypeResponse, command).
		WithHeader(wire.HeaderID, newID()).
		WithHeader(wire.HeaderReplyTo, reqID).
		WithHeader(wire.HeaderTo, from).
		WithHeader(wire.HeaderRC, strconv.Itoa(int(o.rc))).
		WithBody(o.payload)
	if o.kind != "" {
		m.Set(wire.HeaderResult, string(o.kind))
		m.Set(wire.HeaderError, o.text)
	}
	return m
}
