package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// The request/reply hot path, as Emit's is for streams: a request and a
// handler's reply are encoded straight into the connection's pending batch
// (hotpath.AppendFields, sendq.Reserve), and the reader builds the reply's
// Message, a request's Message or a *RequestError from the frame's View,
// with no wire.Message between.

// viewAnswer is the answer the reader sends a request's call once it has
// set the call's reply or rerr from the View.
var viewAnswer = new(wire.Message)

// request sends a request encoded in place (f.ID registered as its call)
// and waits for the reply. While the client is reconnecting it waits for
// the connection, within deadline, as call does. Its errors are Request's.
func (c *Client) request(ctx context.Context, s *Scope, f *hotpath.Fields, payload []byte, deadline time.Time) (*Message, error) {
	size := f.FrameLen(len(payload))
	var stale *conn // a connection seen closing: wait for the next one
	for {
		if err := c.awaitUp(ctx, s, deadline, stale); err != nil {
			return nil, callError(err)
		}
		cn := c.cur.Load()
		if cn == nil {
			continue
		}
		p, err := c.registerView(cn, f.ID, s)
		if errors.Is(err, errNotConnected) {
			continue
		}
		if err != nil {
			return nil, callError(err)
		}
		b, ok := cn.out.Reserve(size)
		if !ok {
			c.forget(f.ID)
			if cn.out.Closing() { // ending before the request left: it was never sent
				stale = cn
				continue
			}
			return nil, callError(errQueueFull)
		}
		var ttlOff int
		*b, ttlOff = hotpath.AppendFields(*b, f, payload)
		// The caller is not a network goroutine, so it may write itself
		// when no batch is being written: no hand-off to the writer.
		cn.out.CommitThrough(ttlOff, deadline)
		if _, err := c.await(ctx, p, f.ID, deadline); err != nil {
			return nil, callError(err)
		}
		if p.rerr != nil {
			return nil, p.rerr
		}
		return p.reply, nil
	}
}

// registerView opens a request's call on cn: its answer is decoded from
// the View by answerView.
func (c *Client) registerView(cn *conn, id string, s *Scope) (*pending, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.registerOnLocked(cn, s, id, nil)
	if err == nil {
		p.view = true
	}
	return p, err
}

// answerView completes the call a response read into v answers when that
// call is a request's: its reply Message (one allocation) or its
// *RequestError is built from v here, on the reader. It reports false,
// doing nothing, for another kind of call, whose answer is decoded.
func (c *Client) answerView(v *hotpath.View) bool {
	id := v.Value(wire.HeaderReplyTo)
	c.mu.Lock()
	p := c.calls[id]
	if p == nil || !p.view {
		c.mu.Unlock()
		return p == nil // nobody waits: dropped, as answer drops it
	}
	delete(c.calls, id)
	c.mu.Unlock()
	if rc := responseRC(v); rc.IsError() {
		e := requestError(v)
		// Every string of v aliases the read buffer, which the next read
		// overwrites: the error keeps copies.
		e.Kind = wire.Result(strings.Clone(string(e.Kind)))
		e.Text, e.From = strings.Clone(e.Text), strings.Clone(e.From)
		p.rerr = e
	} else {
		p.reply = messageFromView(v, Reply, 0)
	}
	c.handoffs.answers.Add(1)
	p.answer <- viewAnswer
	return true
}

// deliverRequestView hands a request to the executor, one task each:
// handlers run concurrently, up to Workers (batching them per read, as
// streams are, would run a read's requests one after another on one
// worker, so one handler that waits would hold up the rest). A request for
// no handler of this node is answered NO_HANDLER, one the executor refuses
// OVERLOAD, both from here (queued, never written by the reader).
func (c *Client) deliverRequestView(cn *conn, v *hotpath.View, now *hotpath.Instant) {
	channel := v.Value(wire.HeaderCommand)
	c.mu.Lock()
	reg := c.handlers[channel]
	c.mu.Unlock()
	if reg == nil {
		c.replyQueued(cn, strings.Clone(channel), strings.Clone(v.Value(wire.HeaderID)), strings.Clone(v.Value(wire.HeaderFrom)),
			wire.ResultNoHandler, "no handler for "+channel+" on "+c.Node())
		return
	}
	var deadline hotpath.Instant
	if ttl, ok := v.Get(wire.HeaderTTL); ok {
		deadline = deadlineFrom(ttl, c.batchNow(now))
	}
	msg := messageFromView(v, Request, deadline)
	if !c.execute(func() { c.runRequest(cn, reg, msg) }) {
		c.replyQueued(cn, msg.Channel(), msg.ID(), msg.From(), wire.ResultOverload, c.Node()+" dispatch queue is full")
	}
}

// runRequest runs a request on an executor worker and sends its reply.
func (c *Client) runRequest(cn *conn, reg *Registration, msg *Message) {
	if o, ok := c.runHandler(reg, msg); ok {
		c.stageReply(cn, msg, o)
		// Replies leave from the handler's worker (never a network
		// goroutine): written here when no batch is being written, else
		// by the writer, which this wakes.
		cn.out.FlushThrough()
	}
}

// stageReply queues a handler's reply on the connection the request came
// on, a success encoded in place; the caller flushes (FlushThrough). Once that connection
// is lost the requester has its DISCONNECT, and the reply is dropped with
// its queue, never sent on another. A reply the full queue refuses is
// dropped, counted: the handler has returned and nobody is left to tell
// but the requester, whose deadline ends its wait; a worker waiting for
// room would stall the dispatch pool.
func (c *Client) stageReply(cn *conn, req *Message, o outcome) {
	if o.rc != wire.RCSuccess {
		c.queueOrCount(cn, replyMessage(req.Channel(), req.ID(), req.From(), o), time.Time{}, &c.drops.replies)
		return
	}
	f := hotpath.Fields{Type: wire.TypeResponse, Command: req.Channel(), ID: newID(), ReplyTo: req.ID(), To: req.From(), RC: rcSuccess}
	b, ok := cn.out.Reserve(f.FrameLen(len(o.payload)))
	if !ok {
		if !cn.out.Closing() {
			c.drops.replies.Add(1)
		}
		return
	}
	var ttlOff int
	*b, ttlOff = hotpath.AppendFields(*b, &f, o.payload)
	cn.out.Stage(ttlOff, time.Time{})
}

// rcSuccess is the rc header of a successful reply.
var rcSuccess = strconv.Itoa(int(wire.RCSuccess))

// responseRC is a response's return code (wire.ResponseRC for a View).
func responseRC(v *hotpath.View) wire.RC {
	rc, ok := v.Get(wire.HeaderRC)
	return wire.ParseResponseRC(rc, ok)
}
