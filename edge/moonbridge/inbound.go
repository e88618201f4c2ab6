package moonbridge

import (
	"strconv"
	"strings"
	"time"

	"busbar/wire"
)

// inbound is an operation busbar opened towards the backend (an event to
// receipt, a request to answer), waiting for the backend's RESPONSE.
type inbound struct {
	id   string // busbar's message id, which the answer replies to
	from string // the caller's address
	kind Kind   // 0 for a stream message, which gets no answer
	msg  Message
	// deadline is when the operation ends unanswered (timer), and its
	// MESSAGE, if not written by then, is dropped.
	deadline time.Time
	timer    *time.Timer
}

func (in *inbound) stop() { in.timer.Stop() }

// timeoutOf is a message's remaining budget in MoonBridge's bounds: its
// ttl (the broker stamps every message with one), at most
// MaxTimeoutMillis, at least MinTimeoutMillis.
func timeoutOf(m *wire.Message) int64 {
	ttl, err := strconv.ParseInt(m.Value(wire.HeaderTTL), 10, 64)
	if err != nil || ttl > MaxTimeoutMillis {
		return MaxTimeoutMillis
	}
	return max(ttl, MinTimeoutMillis)
}

// toBackend hands busbar's event, request or stream message (kind 0) to
// the backend as a MESSAGE to its own endpoint.
func (ss *session) toBackend(m *wire.Message, kind Kind) {
	channel := strings.Clone(m.Value(wire.HeaderCommand))
	in := &inbound{id: strings.Clone(m.Value(wire.HeaderID)), from: strings.Clone(m.Value(wire.HeaderFrom)), kind: kind,
		msg: Message{Channel: channel}}
	if !ValidChannel(channel) {
		ss.answerBus(in, Rejected, CodeRejected, "channel "+strconv.Quote(clip(channel))+
			" cannot reach a MoonBridge backend: its channels are namespace:path of [a-z0-9_.-]")
		return
	}
	self := BackendEndpoint(ss.name)
	in.msg = Message{ID: replyID(in.id), Kind: max(kind, KindEvent), Channel: channel,
		Source: ss.endpointOf(in.from), Target: &self, Payload: m.Body()}
	timeout := timeoutOf(m)
	ss.mu.Lock()
	switch {
	case ss.ended != nil:
		ss.mu.Unlock()
		return
	case len(ss.toBack) >= MaxInflight:
		ss.mu.Unlock()
		ss.answerBus(in, Backpressured, CodeBackpressured, "the backend has "+strconv.Itoa(MaxInflight)+" operations open")
		return
	}
	ss.nextOp++
	op := ss.nextOp
	ss.toBack[op] = in
	budget := time.Duration(timeout) * time.Millisecond
	in.deadline = time.Now().Add(budget)
	in.timer = time.AfterFunc(budget, func() { ss.takeInbound(op, in) })
	ss.mu.Unlock()
	// The frame carries its deadline to the writer, which drops it if the
	// deadline passes first, and else writes what is left then as its
	// timeout (stampTimeout).
	frame, err := EncodeMessage(MessageFrame{OperationID: op, TimeoutMillis: timeout, Message: in.msg})
	if err == nil && !ss.queue(frame, in.deadline) {
		if ss.takeInbound(op, in) {
			ss.answerBus(in, Backpressured, CodeBackpressured, "the backend's write queue is full")
		}
		return
	}
	if err != nil && ss.takeInbound(op, in) {
		ss.answerBus(in, Rejected, CodeRejected, err.Error())
	}
}

// takeInbound removes operation op, if still open; its timer is stopped.
func (ss *session) takeInbound(op int64, in *inbound) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if q := ss.toBack[op]; q == nil || (in != nil && q != in) {
		return false
	}
	delete(ss.toBack, op)
	in.stop()
	return true
}

// answerFromBackend answers busbar with the backend's RESPONSE.
func (ss *session) answerFromBackend(p Response) {
	ss.mu.Lock()
	in := ss.toBack[p.OperationID]
	ss.mu.Unlock()
	if in == nil || !ss.takeInbound(p.OperationID, in) {
		return // late, or one the backend made up
	}
	switch {
	case in.kind == 0:
	case p.Type == ResponseError:
		ss.answerBus(in, codeResult(p.Err.Code), p.Err.Code, p.Err.Detail)
	case in.kind == KindEvent && p.Type == ResponseSend:
		ss.answerBus(in, p.Result, 0, "")
	case in.kind == KindRequest && p.Type == ResponseReply && validReply(&in.msg, p.Reply):
		ss.replyBus(in, p.Reply)
	case in.kind == KindRequest && p.Type == ResponseReply:
		// MoonBridge's BackendExchange: PROTOCOL_ERROR, the connection
		// stays.
		ss.answerBus(in, Failed, CodeProtocolError, "the backend returned a reply for a different request or identity")
	default:
		// MoonBridge's BackendExchange: PROTOCOL_ERROR, and the
		// connection is closed.
		ss.answerBus(in, Failed, CodeProtocolError, "the backend returned the wrong response type")
		ss.close(errWrongType)
	}
}

// errWrongType ends a session whose backend answered an operation with
// a response of another type (a send result to a request, a reply to an
// event), as MoonBridge's proxy ends it.
var errWrongType = malformed(TypeResponse, "a response of the wrong type for its operation")

// validReply is MoonBridge's check of a reply against its request.
func validReply(req, reply *Message) bool {
	return reply != nil && reply.Kind == KindReply && reply.Channel == req.Channel && *reply.ReplyTo == req.ID &&
		reply.Source == *req.Target && reply.Target != nil && *reply.Target == req.Source
}

// answerBus answers busbar's event with a receipt of result r, or its
// request with a failure of code c.
func (ss *session) answerBus(in *inbound, r SendResult, c ErrorCode, detail string) {
	var m *wire.Message
	switch in.kind {
	case 0:
		return
	case KindEvent:
		m = wire.New(wire.TypeResponse, wire.CmdReceipt).WithHeader(wire.HeaderReplyTo, in.id).WithHeader(wire.HeaderResult, string(busReceipt(r)))
	default:
		kind, rc := busError(c)
		m = wire.New(wire.TypeResponse, in.msg.Channel).WithHeader(wire.HeaderID, NewUUID().String()).
			WithHeader(wire.HeaderReplyTo, in.id).WithHeader(wire.HeaderTo, in.from).
			WithHeader(wire.HeaderRC, strconv.Itoa(int(rc))).WithHeader(wire.HeaderResult, string(kind)).
			WithHeader(wire.HeaderError, oneLine(c.String()+": "+detail))
	}
	if err := ss.bus.write(m); err != nil {
		ss.close(err)
	}
}

// replyBus answers busbar's request with the backend's reply; the reply
// keeps its MoonBridge id.
func (ss *session) replyBus(in *inbound, reply *Message) {
	m := wire.New(wire.TypeResponse, in.msg.Channel).WithHeader(wire.HeaderID, reply.ID.String()).
		WithHeader(wire.HeaderReplyTo, in.id).WithHeader(wire.HeaderTo, in.from).
		WithHeader(wire.HeaderRC, "0").WithBody(reply.Payload)
	if err := ss.bus.write(m); err != nil {
		ss.close(err)
	}
}

// busReceipt is the receipt for a backend's send result, each as it is
// (the broker lets an edge's node report all seven).
func busReceipt(r SendResult) wire.Result {
	switch r {
	case Accepted:
		return wire.Accepted
	case NoSubscriber:
		return wire.NoSubscriber
	case NotConnected:
		return wire.NotConnected
	case Backpressured:
		return wire.Backpressured
	case Rejected:
		return wire.Rejected
	case TimedOut:
		return wire.TimedOut
	}
	return wire.Failed
}

// busError is the request error kind and return code of a backend's
// failure code, each its own kind (the broker lets an edge's node claim
// TIMEOUT, REJECTED, NOT_CONNECTED and PROTOCOL_ERROR besides a node's
// NO_HANDLER, OVERLOAD and HANDLER_FAILED); the MoonBridge code also
// starts the error text.
func busError(c ErrorCode) (wire.Result, wire.RC) {
	switch c {
	case CodeNoHandler, CodeClosed:
		return wire.ResultNoHandler, wire.RCFailure
	case CodeBackpressured:
		return wire.ResultOverload, wire.RCFailure
	case CodeHandlerFailed:
		return wire.ResultHandler, wire.RCError
	case CodeTimedOut:
		return wire.ResultTimeout, wire.RCFailure
	case CodeRejected:
		return wire.ResultRejected, wire.RCFailure
	case CodeNotConnected:
		return wire.ResultNotConnected, wire.RCFailure
	case CodeProtocolError:
		return wire.ResultProtocol, wire.RCFailure
	}
	return wire.ResultHandler, wire.RCFailure
}

// oneLine makes text safe for a header value.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
