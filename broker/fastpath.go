package broker

import (
	"strconv"
	"strings"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// The hot path: streams, sends, requests and responses are routed from a
// hotpath.View of the reader's reusable buffer and forwarded as one shared
// encoded frame per message (from and ttl patched in), so routing a stream
// message to N nodes allocates nothing in steady state. Everything else
// (control commands, publications with results, responses whose result
// must be normalised) is decoded and takes route. Strings from the View
// alias the read buffer: whatever outlives the frame is cloned.

// routeView routes one frame, on the hot path when it can.
func (b *Broker) routeView(c *conn, v *hotpath.View) {
	cmd := v.Value(wire.HeaderCommand)
	if !strings.HasPrefix(cmd, wire.ControlPrefix) {
		switch v.Value(wire.HeaderType) {
		case wire.TypeStream:
			b.streamView(c, v, cmd)
			return
		case wire.TypeRequest:
			b.requestView(c, v, cmd)
			return
		case wire.TypeEvent:
			if _, ok := v.Get(wire.HeaderTo); ok {
				b.sendView(c, v, cmd)
				return
			}
		case wire.TypeResponse:
			if b.responseView(c, v) {
				return
			}
		}
	}
	m, err := v.Message()
	if err != nil { // cannot happen: the view parsed
		b.refuseFrame(c, err.Error())
		return
	}
	b.route(c, m)
}

// admitView is admit for a View: the deadline, or a refusal text.
func (b *Broker) admitView(c *conn, v *hotpath.View, channel string) (time.Time, string) {
	ttl, hasTTL := v.Get(wire.HeaderTTL)
	return b.admitParts(c.now(), ttl, hasTTL, channel, len(v.Body()))
}

// frameFrom encodes v once for every destination, from c, with a ttl slot
// when the message has a deadline. It fails when the result would exceed
// the frame limit.
func frameFrom(c *conn, v *hotpath.View, withTTL bool) (*sendq.Frame, bool) {
	f := sendq.NewFrame()
	f.B, f.TTLOff = hotpath.AppendForward(f.B, v, c.addr, withTTL)
	if hotpath.FrameLen(f.B) > wire.MaxMessageBytes {
		f.Release()
		return nil, false
	}
	return f, true
}

func (b *Broker) streamView(c *conn, v *hotpath.View, channel string) {
	deadline, refusal := b.admitView(c, v, channel)
	to, hasTo := v.Get(wire.HeaderTo)
	if refusal == "" && !c.allows(auth.ActionPublish, channel) && !(hasTo && c.allows(auth.ActionSend, channel)) {
		refusal = "not permitted to publish on " + channel
	}
	var f *sendq.Frame
	if refusal == "" {
		var ok bool
		if f, ok = frameFrom(c, v, true); !ok {
			refusal = "frame too large once stamped"
		}
	}
	if refusal != "" {
		b.stats.dropped.Add(1)
		// channel aliases the read buffer; a handler may keep the record.
		b.log.Debug("stream message dropped", "node", c.node, "channel", strings.Clone(channel), "why", refusal)
		return
	}
	deliver := func(d *conn) {
		if d.allows(auth.ActionSubscribe, channel) && !d.enqueueStream(f, deadline) {
			b.stats.dropped.Add(1)
		}
	}
	if !hasTo {
		for _, d := range b.dir.subscribers(channel) {
			deliver(d)
		}
	} else if _, dest, _, _ := b.resolve(to); dest != nil && dest.hasSub(channel) {
		deliver(dest)
	}
	f.Release()
}

// callView is what a send and a request share before routing: a usable
// id, the strings that outlive the frame (answers, the open call), the
// deadline, and a refusal text if admission or the sender's permission
// fails. ok is false when the frame could not even be answered.
func (b *Broker) callView(c *conn, v *hotpath.View, channel string, action auth.Action, what string) (id, ch, to string, deadline time.Time, refusal string, ok bool) {
	id = v.Value(wire.HeaderID)
	if !validID(id) {
		b.refuseFrame(c, what+" needs an id of 1 to "+strconv.Itoa(MaxIDLen)+" bytes")
		return "", "", "", time.Time{}, "", false
	}
	id, ch, to = strings.Clone(id), strings.Clone(channel), strings.Clone(v.Value(wire.HeaderTo))
	deadline, refusal = b.admitView(c, v, ch)
	if refusal == "" && !c.allows(action, ch) {
		refusal = "not permitted to " + string(action) + " on " + ch
	}
	return id, ch, to, deadline, refusal, true
}

func (b *Broker) sendView(c *conn, v *hotpath.View, channel string) {
	id, channel, to, deadline, refusal, ok := b.callView(c, v, channel, auth.ActionSend, "an event")
	if !ok {
		return
	}
	node, dest, _, why := b.resolve(to)
	if refusal == "" {
		refusal = why
	}
	if refusal != "" {
		b.refused(c, "send", channel, refusal)
		b.sendReceipt(c, id, to, wire.Rejected)
		return
	}
	switch {
	case dest == nil && node == b.opts.Name:
		b.sendReceipt(c, id, to, wire.NoSubscriber)
	case dest == nil:
		b.sendReceipt(c, id, to, wire.NotConnected)
	case !dest.allows(auth.ActionSubscribe, channel):
		b.refused(c, "send", channel, node+" may not receive on it")
		b.sendReceipt(c, id, dest.addr, wire.Rejected)
	case !dest.hasSub(channel):
		b.sendReceipt(c, id, dest.addr, wire.NoSubscriber)
	case c.inflight.Load() >= int64(b.opts.MaxInflight):
		b.sendReceipt(c, id, dest.addr, wire.Backpressured)
	case !b.pend.add(dest, id, &call{kind: callReceipt, origin: c, deadline: deadline}):
		b.sendReceipt(c, id, dest.addr, wire.Rejected)
	default:
		if !b.enqueueView(c, dest, v, deadline) {
			b.pend.take(dest, id, callReceipt)
			b.sendReceipt(c, id, dest.addr, wire.Backpressured)
		}
	}
}

// enqueueStream queues a stream frame for c. When c's queue is full and
// c's writer is making progress, it stalls the producer (up to StreamStall
// per message) for room, as nats-server stalls fast producers: a
// subscriber that is merely slower paces the publisher through TCP instead
// of losing messages. When c's writer has completed nothing for
// stuckAfter, the frame is dropped at once, so a stuck node cannot slow
// its publishers down.
func (c *conn) enqueueStream(f *sendq.Frame, deadline time.Time) bool {
	if c.out.EnqueueFrame(f, deadline) {
		return true
	}
	if time.Since(c.out.LastWrite()) > stuckAfter {
		return false
	}
	return c.out.EnqueueFrameWithin(f, deadline, StreamStall)
}

// enqueueView forwards v from c to dest, reporting whether it was queued.
func (b *Broker) enqueueView(c, dest *conn, v *hotpath.View, deadline time.Time) bool {
	f, ok := frameFrom(c, v, !deadline.IsZero())
	if !ok {
		return false
	}
	queued := dest.out.EnqueueFrame(f, deadline)
	f.Release()
	return queued
}

func (b *Broker) requestView(c *conn, v *hotpath.View, channel string) {
	id, channel, to, deadline, refusal, ok := b.callView(c, v, channel, auth.ActionRequest, "a request")
	if !ok {
		return
	}
	if refusal == "" && to == "" {
		refusal = "a request needs a target"
	}
	var (
		node string
		dest *conn
		kind = wire.ResultRejected
	)
	if refusal == "" {
		node, dest, kind, refusal = b.resolve(to)
	}
	if refusal != "" {
		b.refused(c, "request", channel, refusal)
		b.sendRequestError(c, id, channel, kind, refusal)
		return
	}
	switch {
	case dest == nil && node == b.opts.Name:
		b.sendRequestError(c, id, channel, wire.ResultNoHandler, "no handler for "+channel+" on "+node)
	case dest == nil:
		b.sendRequestError(c, id, channel, wire.ResultNoHandler, node+" is not connected")
	case !dest.allows(auth.ActionHandle, channel):
		b.refused(c, "request", channel, node+" may not handle it")
		b.sendRequestError(c, id, channel, wire.ResultRejected, node+" is not permitted to handle "+channel)
	case !dest.hasHandler(channel):
		b.sendRequestError(c, id, channel, wire.ResultNoHandler, "no handler for "+channel+" on "+node)
	case c.inflight.Load() >= int64(b.opts.MaxInflight):
		b.sendRequestError(c, id, channel, wire.ResultOverload, "too many open calls on this connection (limit "+strconv.Itoa(b.opts.MaxInflight)+")")
	case !b.pend.add(dest, id, &call{kind: callRequest, origin: c, deadline: deadline}):
		b.sendRequestError(c, id, channel, wire.ResultRejected, "a request with this id is already open")
	default:
		if !b.enqueueView(c, dest, v, deadline) {
			b.pend.take(dest, id, callRequest)
			b.sendRequestError(c, id, channel, wire.ResultOverload, node+" is not keeping up (its queue is full)")
		}
	}
}

// responseView forwards a response on the hot path. It reports false for
// one whose result must be normalised (routeResponse then handles it).
func (b *Broker) responseView(c *conn, v *hotpath.View) bool {
	if res, ok := v.Get(wire.HeaderResult); ok {
		rc, err := wire.ParseRC(v.Value(wire.HeaderRC))
		switch wire.Result(res) {
		case wire.ResultNoHandler, wire.ResultOverload, wire.ResultHandler:
			if err != nil || !rc.IsError() {
				return false
			}
		default:
			return false
		}
	}
	id := v.Value(wire.HeaderReplyTo)
	cl := b.pend.take(c, id, callRequest)
	if cl == nil {
		b.stats.droppedReplies.Add(1)
		return true
	}
	if n := len(v.Body()); n > b.opts.MaxPayload {
		channel := strings.Clone(v.Value(wire.HeaderCommand))
		b.refused(c, "reply", channel, "reply payload over the limit")
		b.sendRequestError(cl.origin, strings.Clone(id), channel, wire.ResultHandler,
			c.node+" replied with "+strconv.Itoa(n)+" bytes, over the limit of "+strconv.Itoa(b.opts.MaxPayload))
		return true
	}
	if !b.enqueueView(c, cl.origin, v, time.Time{}) {
		b.stats.droppedReplies.Add(1)
	}
	return true
}
