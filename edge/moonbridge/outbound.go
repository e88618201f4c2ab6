package moonbridge

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"busbar/auth"
	"busbar/wire"
)

// pending is an operation a backend opened (a MESSAGE), waiting for
// busbar's answer.
type pending struct {
	op     int64
	msg    Message
	target string // the busbar node, "" for a publication
	timer  *time.Timer
}

func (p *pending) stop() { p.timer.Stop() }

// nodeOf is the busbar node an endpoint names; false when no busbar node
// can have that name.
func (ss *session) nodeOf(e Endpoint) (string, bool) {
	if e.Proxy {
		return ss.s.cfg.ProxyNode, true
	}
	return e.Backend, auth.ValidNodeName(e.Backend) == nil
}

// endpointOf is the endpoint of a busbar node (a node name or address).
func (ss *session) endpointOf(node string) Endpoint {
	node = strings.TrimSuffix(node, ".bus")
	if i := strings.LastIndexByte(node, '.'); i >= 0 { // svc.node: the node
		node = node[i+1:]
	}
	if node == ss.s.cfg.ProxyNode {
		return ProxyEndpoint()
	}
	return BackendEndpoint(node)
}

// respond queues a response to one of the backend's operations.
func (ss *session) respond(p Response) {
	frame, err := EncodeResponse(p)
	if err == nil {
		err = ss.queueResponse(frame)
	}
	if err != nil {
		ss.close(err)
	}
}

func (ss *session) fail(f *MessageFrame, code ErrorCode, detail string) {
	if f.Message.Kind == KindEvent && f.Message.Target != nil {
		ss.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: codeResult(code)})
		return
	}
	ss.respond(Response{OperationID: f.OperationID, Type: ResponseError, Err: Error{Code: code, Detail: detail}})
}

// codeResult is the send result a refusal of a send becomes.
func codeResult(c ErrorCode) SendResult {
	switch c {
	case CodeNotConnected:
		return NotConnected
	case CodeBackpressured:
		return Backpressured
	case CodeTimedOut:
		return TimedOut
	case CodeRejected:
		return Rejected
	}
	return Failed
}

// fromBackend sends a backend's event, request or publication on the bus.
// The source is the backend's authenticated name, whatever the frame said.
func (ss *session) fromBackend(f MessageFrame) {
	m := &f.Message
	m.Source = BackendEndpoint(ss.name)
	if err := auth.ValidChannel(m.Channel); err != nil {
		ss.fail(&f, CodeRejected, err.Error())
		return
	}
	typ, to := wire.TypeEvent, ""
	if m.Kind == KindRequest {
		typ = wire.TypeRequest
	}
	if m.Target != nil {
		node, ok := ss.nodeOf(*m.Target)
		if !ok {
			ss.fail(&f, CodeNotConnected, "no busbar node can be named "+strconv.Quote(clip(m.Target.Backend)))
			return
		}
		to = node
	}
	id := m.ID.String()
	p := &pending{op: f.OperationID, msg: *m, target: to}
	ss.mu.Lock()
	switch {
	case ss.ended != nil:
		ss.mu.Unlock()
		return
	case len(ss.fromBk) >= MaxInflight:
		ss.mu.Unlock()
		ss.fail(&f, CodeBackpressured, "more than "+strconv.Itoa(MaxInflight)+" operations open on this connection")
		return
	case ss.fromBk[id] != nil:
		ss.mu.Unlock()
		ss.fail(&f, CodeRejected, "a message with id "+id+" is already open")
		return
	}
	ss.fromBk[id] = p
	p.timer = time.AfterFunc(time.Duration(f.TimeoutMillis)*time.Millisecond, func() { ss.expire(id, p) })
	ss.mu.Unlock()
	bm := wire.New(typ, m.Channel).WithHeader(wire.HeaderID, id).WithHeader(wire.HeaderTTL, strconv.FormatInt(f.TimeoutMillis, 10)).WithBody(m.Payload)
	if to != "" {
		bm.Set(wire.HeaderTo, to+".bus")
	}
	if err := ss.bus.write(bm); err != nil {
		ss.close(err)
	}
}

// take removes the backend's operation id, if still open.
func (ss *session) take(id string, p *pending) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if q := ss.fromBk[id]; q == nil || (p != nil && q != p) {
		return false
	}
	delete(ss.fromBk, id)
	return true
}

// expire answers an operation whose deadline passed: the deadline covers
// queueing, delivery and the answer.
func (ss *session) expire(id string, p *pending) {
	if !ss.take(id, p) {
		return
	}
	f := MessageFrame{OperationID: p.op, Message: p.msg}
	ss.fail(&f, CodeTimedOut, "no answer before the deadline")
}

// answerFromBus answers a backend's operation with what busbar answered.
func (ss *session) answerFromBus(a *wire.Message) {
	id := a.Value(wire.HeaderReplyTo)
	ss.mu.Lock()
	p := ss.fromBk[id]
	delete(ss.fromBk, id)
	ss.mu.Unlock()
	if p == nil {
		return // late: the backend was answered TIMED_OUT
	}
	p.stop()
	f := MessageFrame{OperationID: p.op, Message: p.msg}
	failed := wire.ResponseRC(a).IsError()
	switch {
	case p.msg.Kind == KindEvent && p.target != "":
		ss.respond(Response{OperationID: p.op, Type: ResponseSend, Result: receiptResult(wire.Result(a.Value(wire.HeaderResult)))})
	case failed:
		ss.fail(&f, ss.failureCode(p, a), errorText(a))
	case p.msg.Kind == KindRequest && len(a.Body()) > MaxPayloadBytes:
		ss.fail(&f, CodeRejected, "the reply of "+strconv.Itoa(len(a.Body()))+" bytes exceeds MoonBridge's limit of "+strconv.Itoa(MaxPayloadBytes))
	case p.msg.Kind == KindRequest:
		ss.respond(Response{OperationID: p.op, Type: ResponseReply, Reply: &Message{
			ID: replyID(a.Value(wire.HeaderID)), Kind: KindReply, Channel: p.msg.Channel,
			Source: *p.msg.Target, Target: &p.msg.Source, ReplyTo: &p.msg.ID, Payload: a.Body()}})
	default:
		ss.published(&f, a)
	}
}

// notConnected is the text busbar's broker gives a request to a node
// that is not connected, after the node's name; it answers that as
// NO_HANDLER, as it answers a node with no handler on the channel, and
// only the text (with the broker, not the node, as the answer's from)
// tells them apart.
const notConnected = " is not connected"

// failureCode is the MoonBridge code of busbar's failed answer a to the
// backend's operation p: busbar's kind, except that a NO_HANDLER the
// broker gave because the target is not connected is NOT_CONNECTED, as
// MoonBridge's proxy answers a backend that is not there.
func (ss *session) failureCode(p *pending, a *wire.Message) ErrorCode {
	r := wire.Result(a.Value(wire.HeaderResult))
	if r == wire.ResultNoHandler && p.target != "" && a.Value(wire.HeaderError) == p.target+notConnected &&
		a.Value(wire.HeaderFrom) != p.target+".bus" {
		return CodeNotConnected
	}
	return errorCode(r)
}

// published answers a publication with one result per candidate node,
// the proxy first (MoonBridge's router puts its own result first, then
// the backends').
func (ss *session) published(f *MessageFrame, a *wire.Message) {
	var nodes []wire.NodeResult
	if err := json.Unmarshal(a.Body(), &nodes); err != nil || len(nodes) > MaxPublishResults {
		ss.fail(f, CodeProtocolError, "busbar's publish results cannot be read")
		return
	}
	res := Response{OperationID: f.OperationID, Type: ResponsePublish, MessageID: f.Message.ID}
	for _, n := range nodes {
		res.Results = append(res.Results, NodeResult{Endpoint: ss.endpointOf(n.Node), Result: receiptResult(n.Result)})
	}
	// A stable sort: the proxy first, the others in busbar's order.
	slices.SortStableFunc(res.Results, func(a, b NodeResult) int {
		switch {
		case a.Endpoint.Proxy == b.Endpoint.Proxy:
			return 0
		case a.Endpoint.Proxy:
			return -1
		}
		return 1
	})
	ss.respond(res)
}

// replyID is a reply's MoonBridge id: busbar's, when it is a UUID (the
// busbar client's ids are), else a fresh one.
func replyID(id string) UUID {
	if u, err := ParseUUID(id); err == nil {
		return u
	}
	return NewUUID()
}

func errorText(a *wire.Message) string {
	if t, ok := a.Get(wire.HeaderError); ok {
		return t
	}
	return string(a.Body())
}

// receiptResult maps a busbar receipt result to MoonBridge's.
func receiptResult(r wire.Result) SendResult {
	switch r {
	case wire.Accepted:
		return Accepted
	case wire.NoSubscriber:
		return NoSubscriber
	case wire.NotConnected:
		return NotConnected
	case wire.Backpressured:
		return Backpressured
	case wire.Rejected:
		return Rejected
	case wire.TimedOut:
		return TimedOut
	}
	return Failed
}

// errorCode maps a busbar request error kind to MoonBridge's code.
func errorCode(r wire.Result) ErrorCode {
	switch r {
	case wire.ResultNoHandler:
		return CodeNoHandler
	case wire.ResultOverload:
		return CodeBackpressured
	case wire.ResultTimeout:
		return CodeTimedOut
	case wire.ResultDisconnect, wire.ResultReplaced, wire.ResultLease, wire.ResultSlow:
		return CodeNotConnected
	case wire.ResultShutdown:
		return CodeClosed
	case wire.ResultNotConnected:
		return CodeNotConnected
	case wire.ResultRejected, wire.ResultAuth, wire.ResultTooLarge:
		return CodeRejected
	case wire.ResultHandler, "":
		return CodeHandlerFailed
	}
	return CodeProtocolError
}
