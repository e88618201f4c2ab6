package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// route handles one frame from a registered node.
func (b *Broker) route(c *conn, m *wire.Message) {
	cmd := m.Value(wire.HeaderCommand)
	if strings.HasPrefix(cmd, wire.ControlPrefix) {
		b.control(c, m, cmd)
		return
	}
	switch m.Value(wire.HeaderType) {
	case wire.TypeEvent:
		if _, hasTo := m.Get(wire.HeaderTo); hasTo {
			b.viaView(c, m)
			return
		}
		id := m.Value(wire.HeaderID)
		if !validID(id) {
			b.refuseFrame(c, "an event needs an id of 1 to "+strconv.Itoa(MaxIDLen)+" bytes")
			return
		}
		b.publish(c, m, id, cmd)
	case wire.TypeRequest, wire.TypeStream:
		b.viaView(c, m)
	case wire.TypeResponse:
		b.routeResponse(c, m)
	default:
		b.stats.malformed.Add(1)
		c.enqueue(errorFrame(wire.ResultMalformed, "message type must be event, request, response or stream"), time.Time{})
	}
}

// viaView routes a decoded message of a kind the hot path handles, so
// sends, requests and streams have one implementation (fastpath.go).
func (b *Broker) viaView(c *conn, m *wire.Message) {
	var v hotpath.View
	if err := hotpath.ParseView(m.ToBytes(), &v); err != nil {
		b.refuseFrame(c, err.Error())
		return
	}
	b.routeView(c, &v)
}

// admit checks what every event and request must satisfy and stamps the
// authenticated source. It returns the deadline, or a refusal text.
func (b *Broker) admit(c *conn, m *wire.Message, channel string) (time.Time, string) {
	ttl, hasTTL := m.Get(wire.HeaderTTL)
	deadline, refusal := b.admitParts(c.now(), ttl, hasTTL, channel, len(m.Body()))
	if refusal == "" {
		// The source is whoever authenticated; a client's own "from" is overwritten.
		m.Set(wire.HeaderFrom, c.addr)
	}
	return deadline, refusal
}

// admitParts is the admission both paths share: the ttl (capped at
// MaxTTL), the channel's syntax, the payload limit, and no shutdown under
// way. It returns the deadline, or a refusal text.
func (b *Broker) admitParts(now time.Time, ttl string, hasTTL bool, channel string, bodyLen int) (time.Time, string) {
	budget := b.opts.MaxTTL
	if hasTTL {
		ms, err := strconv.ParseUint(ttl, 10, 32)
		if err != nil {
			return now, "ttl must be a number of milliseconds"
		}
		budget = min(budget, time.Duration(ms)*time.Millisecond)
	}
	if err := auth.ValidChannel(channel); err != nil {
		return now, err.Error()
	}
	if bodyLen > b.opts.MaxPayload {
		return now, "payload of " + strconv.Itoa(bodyLen) + " bytes exceeds the limit of " + strconv.Itoa(b.opts.MaxPayload)
	}
	if b.draining() {
		return now, "broker is shutting down"
	}
	return now.Add(budget), ""
}

// validID reports whether id can key an open call.
func validID(id string) bool { return id != "" && len(id) <= MaxIDLen }

// resolve finds the connection of a target. A bare name is a service in
// the registry (seed 004): one live instance is its node; several are
// ambiguous; none falls back to the node of that name, so every node stays
// reachable by its name. It returns the node name, the connection (nil
// when not connected), and the kind and text of a refusal.
func (b *Broker) resolve(to string) (string, *conn, wire.Result, string) {
	t, err := wire.ParseTarget(to)
	if err != nil {
		return "", nil, wire.ResultRejected, err.Error()
	}
	var node string
	switch t.Kind {
	case wire.TargetCrossMesh:
		return "", nil, wire.ResultRejected, wire.ErrCrossMesh.Error()
	case wire.TargetService:
		switch conns := b.reg.instances(t.Service); len(conns) {
		case 0:
			node = t.Service
		case 1:
			return conns[0].node, conns[0], "", ""
		default:
			nodes := make([]string, len(conns))
			for i, c := range conns {
				nodes[i] = c.node
			}
			slices.Sort(nodes)
			return "", nil, wire.ResultAmbiguous, fmt.Sprintf("service %q has %d live instances (on %s): address one as %s.<node>.bus",
				t.Service, len(conns), strings.Join(nodes, ", "), t.Service)
		}
	default:
		node = t.Addr.Node
	}
	return node, b.dir.lookup(node), "", ""
}

// routeResponse forwards a response to the call it answers. A response that
// matches no open call (late, or forged) is dropped and counted.
func (b *Broker) routeResponse(c *conn, m *wire.Message) {
	id := m.Value(wire.HeaderReplyTo)
	cl := b.pend.take(c, id, callRequest)
	if cl == nil {
		b.stats.droppedReplies.Add(1)
		return
	}
	if n := len(m.Body()); n > b.opts.MaxPayload {
		b.refused(c, "reply", m.Value(wire.HeaderCommand), "reply payload over the limit")
		b.sendRequestError(cl.origin, id, m.Value(wire.HeaderCommand), wire.ResultHandler,
			c.node+" replied with "+strconv.Itoa(n)+" bytes, over the limit of "+strconv.Itoa(b.opts.MaxPayload))
		return
	}
	m.Set(wire.HeaderFrom, c.addr)
	normalizeResult(m)
	if !cl.origin.enqueue(m, time.Time{}) {
		b.stats.droppedReplies.Add(1)
	}
}

// normalizeResult keeps a node from passing its failure off as the
// broker's (a DISCONNECT or TIMEOUT it never had): a node may only report
// that it has no handler, is overloaded, or that its handler failed.
func normalizeResult(m *wire.Message) {
	if !wire.ResponseRC(m).IsError() {
		m.Del(wire.HeaderResult)
		return
	}
	switch wire.Result(m.Value(wire.HeaderResult)) {
	case wire.ResultNoHandler, wire.ResultOverload, wire.ResultHandler:
	default:
		m.Set(wire.HeaderResult, string(wire.ResultHandler))
	}
}

// receipt forwards a destination's receipt to the sender, or records it in
// its publication.
func (b *Broker) receipt(c *conn, m *wire.Message) {
	id := m.Value(wire.HeaderReplyTo)
	cl := b.pend.take(c, id, callReceipt, callPublish)
	if cl == nil {
		b.stats.droppedReplies.Add(1)
		return
	}
	r := wire.Result(m.Value(wire.HeaderResult))
	switch r {
	case wire.Accepted, wire.NoSubscriber, wire.Backpressured, wire.Rejected:
	default:
		r = wire.Failed // a node may only report what it did
	}
	switch cl.kind {
	case callReceipt:
		b.sendReceipt(cl.origin, id, c.addr, r)
	case callPublish:
		b.recordPub(cl.pub, c.node, r)
	default:
		b.stats.droppedReplies.Add(1)
	}
}

// publish fans an event out to the broker and every connected node
// permitted to receive the channel, the publisher included (seed 003), and
// answers with one result per candidate.
func (b *Broker) publish(c *conn, m *wire.Message, id, channel string) {
	deadline, refusal := b.admit(c, m, channel)
	if refusal == "" && !c.allows(auth.ActionPublish, channel) {
		refusal = "not permitted to publish on " + channel
	}
	if refusal == "" && c.inflight.Load() >= int64(b.opts.MaxInflight) {
		b.sendPublishRefused(c, id, wire.ResultOverload, "too many open calls on this connection (limit "+strconv.Itoa(b.opts.MaxInflight)+")")
		return
	}
	var cands []*conn
	selfConnected := b.dir.lookup(b.opts.Name) != nil
	if refusal == "" {
		cands = b.candidates(channel)
		n := len(cands)
		if !selfConnected {
			n++ // the broker is a candidate even with no code embedded
		}
		if n > MaxPublishCandidates {
			refusal = "publication would reach " + strconv.Itoa(n) + " nodes, more than " + strconv.Itoa(MaxPublishCandidates)
		}
	}
	if refusal != "" {
		b.refused(c, "publish", channel, refusal)
		b.sendPublishRefused(c, id, wire.ResultRejected, refusal)
		return
	}
	pub := &publication{origin: c, id: id, deadline: deadline}
	if !selfConnected {
		// The broker is always a candidate; with no code embedded it has no
		// subscribers.
		pub.results = append(pub.results, wire.NodeResult{Node: b.opts.Name, Result: wire.NoSubscriber})
	}
	var deliver []*conn
	for _, d := range cands {
		res := wire.NodeResult{Node: d.node}
		if d.hasSub(channel) {
			deliver = append(deliver, d)
			pub.remaining++
		} else {
			res.Result = wire.NoSubscriber
		}
		pub.results = append(pub.results, res)
	}
	if pub.remaining == 0 {
		b.sendPublished(pub)
		return
	}
	b.pend.openPub(pub)
	for _, d := range deliver {
		switch {
		case !b.pend.add(d, id, &call{kind: callPublish, origin: c, deadline: deadline, pub: pub}):
			b.recordPub(pub, d.node, wire.Rejected)
		case !d.enqueue(m, deadline):
			b.pend.take(d, id, callPublish)
			b.recordPub(pub, d.node, wire.Backpressured)
		}
	}
}

// candidates returns the connected nodes permitted to receive channel.
func (b *Broker) candidates(channel string) []*conn {
	var out []*conn
	for _, d := range b.dir.all() {
		if d.allows(auth.ActionSubscribe, channel) {
			out = append(out, d)
		}
	}
	return out
}

func (b *Broker) sendReceipt(to *conn, id, from string, r wire.Result) {
	m := wire.New(wire.TypeResponse, wire.CmdReceipt).
		WithHeader(wire.HeaderReplyTo, id).
		WithHeader(wire.HeaderResult, string(r))
	if from != "" {
		m.Set(wire.HeaderFrom, from)
	}
	if !to.enqueue(m, time.Time{}) {
		b.stats.droppedReplies.Add(1)
	}
}

func (b *Broker) sendRequestError(to *conn, id, channel string, kind wire.Result, text string) {
	m := wire.New(wire.TypeResponse, channel).
		WithHeader(wire.HeaderReplyTo, id).
		WithHeader(wire.HeaderFrom, b.opts.Name+".bus").
		WithHeader(wire.HeaderRC, strconv.Itoa(int(wire.RCFailure))).
		WithHeader(wire.HeaderResult, string(kind)).
		WithHeader(wire.HeaderError, text)
	if !to.enqueue(m, time.Time{}) {
		b.stats.droppedReplies.Add(1)
	}
}

func (b *Broker) sendPublishRefused(to *conn, id string, kind wire.Result, text string) {
	m := wire.New(wire.TypeResponse, wire.CmdPublished).
		WithHeader(wire.HeaderReplyTo, id).
		WithHeader(wire.HeaderRC, strconv.Itoa(int(wire.RCError))).
		WithHeader(wire.HeaderResult, string(kind)).
		WithHeader(wire.HeaderError, text)
	if !to.enqueue(m, time.Time{}) {
		b.stats.droppedReplies.Add(1)
	}
}

// refuseFrame answers a frame that cannot be routed at all (no id to answer).
func (b *Broker) refuseFrame(c *conn, text string) {
	b.stats.malformed.Add(1)
	c.enqueue(errorFrame(wire.ResultMalformed, text), time.Time{})
}

func (b *Broker) refused(c *conn, op, channel, why string) {
	b.stats.refused.Add(1)
	b.log.Warn("refused", "node", c.node, "op", op, "channel", channel, "why", why)
}

// control handles bus.* commands addressed to the broker itself.
func (b *Broker) control(c *conn, m *wire.Message, cmd string) {
	if cmd == wire.CmdReceipt {
		b.receipt(c, m)
		return
	}
	id := m.Value(wire.HeaderID)
	reply := func(rc wire.RC, res wire.Result, text string, body []byte) {
		r := wire.New(wire.TypeResponse, cmd).WithHeader(wire.HeaderReplyTo, id).
			WithHeader(wire.HeaderRC, strconv.Itoa(int(rc))).WithBody(body)
		if res != "" {
			r.Set(wire.HeaderResult, string(res))
			r.Set(wire.HeaderError, text)
		}
		c.enqueue(r, time.Time{})
	}
	if !validID(id) || m.Value(wire.HeaderType) != wire.TypeRequest {
		b.refuseFrame(c, cmd+" must be a request with an id")
		return
	}
	switch cmd {
	case wire.CmdSubscribe, wire.CmdUnsub, wire.CmdHandle, wire.CmdUnhandle:
		channel := string(m.Body())
		if err := b.register(c, cmd, channel); err != nil {
			b.refused(c, cmd, channel, err.Error())
			reply(wire.RCError, wire.ResultRejected, err.Error(), nil)
			return
		}
		reply(wire.RCSuccess, "", "", nil)
	case wire.CmdDirectory:
		// The body may name one node; the answer must fit one message.
		nodes := b.Directory()
		if want := string(m.Body()); want != "" {
			nodes = slices.DeleteFunc(nodes, func(n wire.NodeInfo) bool { return n.Node != want })
		}
		body, _ := json.Marshal(nodes)
		if len(body) > b.opts.MaxPayload {
			reply(wire.RCError, wire.ResultRejected, "the directory is "+strconv.Itoa(len(body))+" bytes, over the payload limit; ask for one node", nil)
			return
		}
		reply(wire.RCSuccess, "", "", body)
	case wire.CmdAnnounce:
		var a wire.Announcement
		if err := json.Unmarshal(m.Body(), &a); err != nil {
			reply(wire.RCError, wire.ResultRejected, "announcement: "+err.Error(), nil)
			return
		}
		info, err := b.announce(c, a)
		if err != nil {
			b.refused(c, cmd, a.Service, err.Error())
			reply(wire.RCError, wire.ResultRejected, err.Error(), nil)
			return
		}
		body, _ := wire.JSON(info)
		reply(wire.RCSuccess, "", "", body)
	case wire.CmdWithdraw:
		if !b.withdraw(c, string(m.Body())) {
			reply(wire.RCError, wire.ResultRejected, "this connection announced no service "+strconv.Quote(string(m.Body())), nil)
			return
		}
		reply(wire.RCSuccess, "", "", nil)
	case wire.CmdWhois:
		body, _ := wire.JSON(b.reg.services(string(m.Body())))
		if len(body) > b.opts.MaxPayload {
			reply(wire.RCError, wire.ResultRejected, "the registry is "+strconv.Itoa(len(body))+" bytes, over the payload limit; ask for one service", nil)
			return
		}
		reply(wire.RCSuccess, "", "", body)
	case wire.CmdWatch:
		// The answer is queued under the registry's lock, before any event.
		b.reg.watch(c, func(now []wire.ServiceInfo) bool {
			body, _ := wire.JSON(now)
			if len(body) > b.opts.MaxPayload {
				reply(wire.RCError, wire.ResultRejected, "the registry is "+strconv.Itoa(len(body))+" bytes, over the payload limit", nil)
				return false
			}
			reply(wire.RCSuccess, "", "", body)
			return true
		})
	case wire.CmdUnwatch:
		b.reg.unwatch(c)
		reply(wire.RCSuccess, "", "", nil)
	case wire.CmdStateSet, wire.CmdStateOpen, wire.CmdStateGet, wire.CmdStateWatch, wire.CmdStateUnwatch:
		b.stateControl(c, m, cmd, reply)
	default:
		reply(wire.RCError, wire.ResultRejected, "unknown control command "+cmd, nil)
	}
}

// register records a subscription or handler after checking the receive
// permission, which is independent of the sending ones.
func (b *Broker) register(c *conn, cmd, channel string) error {
	if err := auth.ValidChannel(channel); err != nil {
		return err
	}
	set, action := c.subs, auth.ActionSubscribe
	if cmd == wire.CmdHandle || cmd == wire.CmdUnhandle {
		set, action = c.handles, auth.ActionHandle
	}
	adding := cmd == wire.CmdSubscribe || cmd == wire.CmdHandle
	if adding && !c.allows(action, channel) {
		return errors.New("not permitted to " + string(action) + " on " + channel)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !adding {
		delete(set, channel)
		if action == auth.ActionSubscribe {
			b.dir.unsubscribe(c, channel)
		}
		return nil
	}
	if _, ok := set[channel]; !ok && len(c.subs)+len(c.handles) >= b.opts.MaxRegistrations {
		return errors.New("too many registrations on this connection (limit " + strconv.Itoa(b.opts.MaxRegistrations) + ")")
	}
	set[channel] = struct{}{}
	if action == auth.ActionSubscribe {
		b.dir.subscribe(c, channel)
	}
	return nil
}
