package broker

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// Routing is one pipeline for every frame a registered node sends. The
// reader parses a frame into a hotpath.View over its reusable buffer (no
// copy); dispatch picks the handler by type; the handler decides with the
// View's strings and returns a *refusal, or forwards. What is forwarded is
// encoded once, with the authenticated source and the remaining deadline
// stamped in, and that one frame is shared by every destination's queue:
// routing a message to N nodes allocates nothing in steady state. Strings
// from the View alias the read buffer, so whatever outlives the frame is
// cloned. Control commands (bus.*) are decoded into a wire.Message first:
// they are rare, and their bodies are parsed anyway. The path of one
// message is drawn in docs/ARCHITECTURE.md.

// dispatch routes one frame read from c, waking its destinations' writers
// at once.
func (b *Broker) dispatch(c *conn, frame []byte, v *hotpath.View) { b.dispatchHeld(c, frame, v, nil) }

// dispatchHeld routes one frame read from c; what it queues for other
// connections is held in h, when h is not nil, until h.flush.
func (b *Broker) dispatchHeld(c *conn, frame []byte, v *hotpath.View, h *held) {
	if err := hotpath.ParseView(frame, v); err != nil {
		// The stream is still in sync: the node hears why and stays,
		// unless it sends nothing else.
		b.malformedFrame(c, err)
		return
	}
	b.dispatchView(c, v, h)
}

// dispatchView routes one frame read from c and parsed into v; h as for
// dispatchHeld.
func (b *Broker) dispatchView(c *conn, v *hotpath.View, h *held) {
	c.active.Store(true) // the sweeper turns this into lastRead: no clock read per frame
	c.malformedRun = 0
	c.countIn(v, v.Len())
	defer c.dispatched()
	if v.IsHeartbeat() {
		return
	}
	cmd := v.Value(wire.HeaderCommand)
	if strings.HasPrefix(cmd, wire.ControlPrefix) {
		b.control(c, v, cmd)
		return
	}
	if b.taps.list.Load() != nil {
		b.tap(c.addr, v, cmd)
	}
	switch v.Value(wire.HeaderType) {
	case wire.TypeStream:
		b.routeStream(c, v, cmd, h)
	case wire.TypeEvent:
		if _, ok := v.Get(wire.HeaderTo); ok {
			b.routeCall(c, v, cmd, kindSend, h)
		} else {
			b.routeCall(c, v, cmd, kindPublish, h)
		}
	case wire.TypeRequest:
		b.routeCall(c, v, cmd, kindRequest, h)
	case wire.TypeResponse:
		b.routeResponse(c, v, h)
	default:
		b.answer(c, subject{kind: kindFrame}, refuse(wire.ResultMalformed, "message type must be event, request, response or stream"))
	}
}

// admit checks what every stream, send, request and publication must
// satisfy: the ttl (capped at MaxTTL), the channel's syntax, the payload
// limit, and no shutdown under way. It returns the message's deadline.
func (b *Broker) admit(c *endpoint, v *hotpath.View, channel string) (time.Time, *refusal) {
	now := c.now()
	budget := b.opts.MaxTTL
	if ttl, ok := v.Get(wire.HeaderTTL); ok {
		ms, err := strconv.ParseUint(ttl, 10, 32)
		if err != nil {
			return now, rejectf("ttl must be a number of milliseconds")
		}
		budget = min(budget, time.Duration(ms)*time.Millisecond)
	}
	if err := auth.ValidChannel(channel); err != nil {
		return now, rejectf("%v", err)
	}
	if n := len(v.Body()); n > b.opts.MaxPayload {
		return now, rejectf("payload of %d bytes exceeds the limit of %d", n, b.opts.MaxPayload)
	}
	if b.draining() {
		return now, rejectf("broker is shutting down")
	}
	return now.Add(budget), nil
}

// permit checks the sender's permission for action on channel.
func permit(c dest, action auth.Action, channel string) *refusal {
	if !c.allows(action, channel) {
		return rejectf("not permitted to %s on %s", action, channel)
	}
	return nil
}

// errStampedTooLarge refuses a message that fit the frame limit as sent
// but not once the broker stamped its source and deadline into it: a
// permanent refusal (REJECTED), so the sender does not retry it.
var errStampedTooLarge = rejectf("the message is over the frame limit once its source and deadline are stamped; send less")

// frameFrom encodes v once for every destination, stamped from from (the
// sender's address), with a ttl slot when the message has a deadline.
func frameFrom(from string, v *hotpath.View, withTTL bool) (*sendq.Frame, *refusal) {
	f := sendq.NewFrame()
	f.B, f.TTLOff = hotpath.AppendForward(f.B, v, from, withTTL)
	if hotpath.FrameLen(f.B) > wire.MaxMessageBytes {
		f.Release()
		return nil, errStampedTooLarge
	}
	return f, nil
}

// routeStream delivers a fire-and-forget message to the subscribers of its
// channel (or to its target's, when it has one). Nobody is answered: what
// is not delivered is counted as a drop, with its reason.
func (b *Broker) routeStream(c *conn, v *hotpath.View, channel string, h *held) {
	if r := b.deliverStream(c, v, channel, h); r != nil {
		b.answer(c, subject{kind: kindStream, command: channel}, r)
	}
}

func (b *Broker) deliverStream(c *conn, v *hotpath.View, channel string, h *held) *refusal {
	deadline, r := b.admit(&c.endpoint, v, channel)
	if r != nil {
		return r
	}
	to, hasTo := v.Get(wire.HeaderTo)
	if !c.allows(auth.ActionPublish, channel) && !(hasTo && c.allows(auth.ActionSend, channel)) {
		return rejectf("not permitted to publish on %s", channel)
	}
	fw, r := c.forwarding(c.addr, v, true)
	if r != nil {
		return r
	}
	defer fw.release()
	if hasTo {
		if t, _ := b.resolve(to, false, need{channel: channel}); t.dest != nil && t.dest.hasSub(channel) {
			b.streamTo(&c.endpoint, t.dest, fw, channel, deadline, h)
		}
		return nil
	}
	subs := b.dir.subscribers(channel)
	brokers := b.bus.subscribedBrokers(channel)
	subs, choice := b.shareQueues(channel, subs, len(brokers) > 0)
	var lf linkFrames
	if len(brokers) > 0 {
		if lf, r = newLinkFrames(v, fw.frame(), choice); r != nil {
			return r
		}
		defer lf.release()
	}
	for _, d := range subs {
		b.streamTo(&c.endpoint, d, fw, channel, deadline, h)
	}
	link := &c.fwLink
	*link = forward{v: v, from: fw.from, ttl: true} // each broker's frame, made
	for _, name := range brokers {
		if _, told := choice[name]; told && choice[name] == "" && !b.bus.plainSubscribers(name, channel) {
			continue // only queue members there, none of them chosen
		}
		link.f = lf.frame(name)
		switch l := b.bus.linkTo(name); {
		case l == nil:
		case !b.linkFits(link.f):
			b.stats.drop(DropStreamTooLarge)
		default:
			b.streamTo(&c.endpoint, l, link, channel, deadline, h)
		}
	}
	*link = forward{}
	return nil
}

// streamTo queues a stream message from the sender e for d, when d may
// receive channel, counting it, or its drop and why.
func (b *Broker) streamTo(e *endpoint, d dest, fw *forward, channel string, deadline time.Time, h *held) {
	if !d.allows(auth.ActionSubscribe, channel) {
		return
	}
	n, reason, ok := d.putStream(fw, deadline, h)
	if !ok {
		b.stats.drop(reason)
		return
	}
	e.countOut(MsgStream, n)
}

// linkFits reports whether f, forwarded, can cross to another broker and
// be read there.
func (b *Broker) linkFits(f *sendq.Frame) bool {
	return b.bus.frameFits(f) && hotpath.FrameLen(f.B) <= wire.MaxMessageBytes
}

// forward is a message read from a connection on its way to its
// destinations, with from stamped and, for the kinds that carry a
// deadline, a ttl slot: encoded straight into each node's queue when its
// length is known up front (size), and as one shared frame, made the
// first time one is needed, for links, for a stall, and for the frames
// whose length is not (f set from the start).
type forward struct {
	v    *hotpath.View
	from string
	ttl  bool
	size int          // the forwarded frame's length, prefix included; 0: unknown
	f    *sendq.Frame // the shared frame, once made
}

// forwarding prepares v, sent from the address from, for forwarding, or
// refuses a frame that the stamp takes past wire.MaxMessageBytes. The
// forward is e's own (endpoint.fw): e's reader routes one message at a
// time, and a forward of the routing function's own would escape to the
// heap, an allocation per message, once handed to a dest's methods.
// release ends its use.
func (e *endpoint) forwarding(from string, v *hotpath.View, withTTL bool) (*forward, *refusal) {
	fw := &e.fw
	*fw = forward{v: v, from: from, ttl: withTTL}
	if n, ok := hotpath.ForwardLen(v, fw.from, withTTL); ok {
		if n-hotpath.PrefixLen > wire.MaxMessageBytes {
			return fw, errStampedTooLarge
		}
		fw.size = n
		return fw, nil
	}
	var r *refusal
	fw.f, r = frameFrom(from, v, withTTL)
	return fw, r
}

// frame returns the shared frame, making it the first time.
func (fw *forward) frame() *sendq.Frame {
	if fw.f == nil {
		fw.f = sendq.NewFrame()
		fw.f.B, fw.f.TTLOff = hotpath.AppendForward(fw.f.B, fw.v, fw.from, fw.ttl)
	}
	return fw.f
}

// release gives the shared frame back, if it was made, and forgets the
// message.
func (fw *forward) release() {
	if fw.f != nil {
		fw.f.Release()
	}
	*fw = forward{}
}

// enqueueStream queues a stream message for c and returns the bytes it
// queued. A node's connection takes stream frames freely up to its
// queue's pace mark (encoded in place there: no shared frame, no copy by
// its writer), and past it stalls the producer for room below the mark,
// as nats-server stalls fast producers: a subscriber that is merely
// slower paces the publisher through TCP instead of losing messages. The
// stall waits until frozenAfter has passed since c's writer last wrote
// (at least streamStall); c is taken for frozen only if its writer wrote
// nothing in all that time. A stall that runs out queues the
// frame in the reserve above the mark (sendq.ReserveShare), which is there
// for a subscriber that is not scheduled for a while — on two busy cores,
// often longer than a stall — and drops it only when the reserve is full
// too. A stall during which c's writer wrote nothing is not tried again
// until it does, so a subscriber that froze costs its publishers one
// stall, not one per message (and the healthy subscribers of the same
// publisher keep their rate and latency) while its reserve fills; and
// when c's writer has completed nothing for stuckAfter, the frame is
// dropped at once.
func (c *conn) enqueueStream(fw *forward, deadline time.Time, h *held) (int, DropReason, bool) {
	if n, ok := c.put(h, fw, deadline, true); ok {
		return n, 0, true
	}
	r, ok, _ := c.stallFor(fw.frame, deadline, streamStall, frozenAfter, stuckAfter, true, h)
	if ok {
		return len(fw.f.B), 0, true // the stall queued the shared frame
	}
	if r == DropQueueFull {
		if n, ok := c.put(h, fw, deadline, false); ok { // the reserve
			return n, 0, true
		}
	}
	return 0, r, false
}

// stallFor is one stall of enqueueStream: it waits for room in c's full
// queue (below its pace mark, with paced) until c's writer has made no
// progress for frozen (at least minStall), unless it made none for stuck
// or since the last stall ran out. Only a stall that waits flushes what h
// holds for the other destinations first (they need not wait for this
// one) and makes the shared frame it queues: a subscriber that is not
// waited for costs each message one check, so a frozen one does not turn
// the reader's batches into a write per message to the others.
// progressed reports a writer that wrote during a stall that still found
// no room.
func (c *endpoint) stallFor(frame func() *sendq.Frame, deadline time.Time, minStall, frozen, stuck time.Duration, paced bool, h *held) (r DropReason, ok, progressed bool) {
	last := c.out.LastWrite()
	idle := time.Since(last)
	switch {
	case idle > stuck:
		return DropStuckReader, false, false
	case c.stallFailed.Load() == last.UnixNano():
		return DropQueueFull, false, false // no progress since the last stall ran out
	}
	h.flush()
	c.b.stats.streamStalls.Add(1)
	if c.out.EnqueueFrameWithin(frame(), deadline, max(minStall, frozen-idle), paced) {
		return 0, true, true
	}
	if c.out.LastWrite().Equal(last) {
		// Not a byte written for frozen: frozen, as far as a publisher
		// can tell. A writer that progressed but freed no room yet (a
		// big batch to a slower reader) is waited for again.
		c.stallFailed.Store(last.UnixNano())
		return DropQueueFull, false, false
	}
	return DropQueueFull, false, true
}

// source is where a call came from, as routing needs it: the dest its
// answer goes back to, its endpoint, and the address stamped on what is
// forwarded. Each entry makes its own: dispatchView for a node's frames,
// dispatchLink for what a link brought, which came over a link (fromLink):
// the other broker bounds its sender's open calls, and its target is one
// of this broker's nodes (it never travels on to a third broker).
type source struct {
	d        dest
	e        *endpoint
	from     string
	fromLink bool
}

func nodeSource(c *conn) source { return source{d: c, e: &c.endpoint, from: c.addr} }

// routeCall routes a message that opens a call: a send (its receipt), a
// request (its response) or a publication (one receipt per candidate).
// Every refusal is answered in the form the kind calls for.
func (b *Broker) routeCall(c *conn, v *hotpath.View, channel string, k kind, h *held) {
	id := v.Value(wire.HeaderID)
	if !validID(id) {
		what := "an event"
		if k == kindRequest {
			what = "a request"
		}
		b.answer(c, subject{kind: kindFrame}, refuse(wire.ResultMalformed, what+" needs an id of 1 to "+strconv.Itoa(MaxIDLen)+" bytes"))
		return
	}
	// The id keys the open call, so it is kept; the channel and the target
	// alias the read buffer, and answer clones them if it must.
	s := subject{kind: k, id: strings.Clone(id), command: channel}
	var r *refusal
	switch k {
	case kindSend:
		s.from = v.Value(wire.HeaderTo)
		r = b.deliverSend(nodeSource(c), v, &s, h)
	case kindRequest:
		r = b.deliverRequest(nodeSource(c), v, s, v.Value(wire.HeaderTo), h)
	case kindPublish:
		r = b.deliverPublish(c, v, s)
	}
	if r != nil {
		b.answer(c, s, r)
	}
}

// validID reports whether id can key an open call.
func validID(id string) bool { return id != "" && len(id) <= MaxIDLen }

// deliverSend forwards an event to its target node, whose receipt will
// answer it. s.from is the target as given, and becomes the destination's
// address once it is known.
func (b *Broker) deliverSend(o source, v *hotpath.View, s *subject, h *held) *refusal {
	deadline, r := b.admit(o.e, v, s.command)
	if r == nil {
		r = permit(o.d, auth.ActionSend, s.command)
	}
	if r != nil {
		return r
	}
	t, r := b.resolve(s.from, o.fromLink, need{channel: s.command})
	node, dest := t.node, t.dest
	switch {
	case r != nil:
		return r
	case dest == nil && node == b.opts.Name:
		return refuse(wire.NoSubscriber, "")
	case dest == nil:
		return refuse(wire.NotConnected, "")
	}
	s.from = dest.address(node)
	switch {
	case !dest.allows(auth.ActionSubscribe, s.command):
		return rejectf("%s may not receive on %s", node, s.command)
	case !dest.hasSub(s.command):
		return refuse(wire.NoSubscriber, "")
	}
	return b.forwardCall(o, dest, v, s, callReceipt, deadline, h, nil, nil)
}

// deliverRequest forwards a request to the one handler of its channel on
// the target node.
func (b *Broker) deliverRequest(o source, v *hotpath.View, s subject, to string, h *held) *refusal {
	deadline, r := b.admit(o.e, v, s.command)
	if r == nil {
		r = permit(o.d, auth.ActionRequest, s.command)
	}
	if r == nil && to == "" {
		r = rejectf("a request needs a target")
	}
	if r != nil {
		return r
	}
	t, r := b.resolve(to, o.fromLink, need{channel: s.command, request: true})
	node, dest := t.node, t.dest
	switch {
	case r != nil:
		return r
	case dest == nil && node == b.opts.Name:
		return refuse(wire.ResultNoHandler, "no handler for "+s.command+" on "+node)
	case dest == nil:
		return refuse(wire.ResultNoHandler, node+" is not connected")
	case !dest.allows(auth.ActionHandle, s.command):
		return rejectf("%s is not permitted to handle %s", node, s.command)
	case !dest.hasHandler(s.command):
		return refuse(wire.ResultNoHandler, "no handler for "+s.command+" on "+node)
	}
	load := t.load
	if load == nil {
		load = dest.requestLoad()
	}
	var keep func(*sendq.Frame) *chooseAgain
	if t.remoteMember {
		keep = func(f *sendq.Frame) *chooseAgain { return keepForAgain(t, to, s.command, f) }
	}
	return b.forwardCall(o, dest, v, &s, callRequest, deadline, h, load, keep)
}

// forwardCall opens the call dest must answer and queues v for dest; the
// call counts in load (if not nil) while open. A send's answer maps
// OVERLOAD to BACKPRESSURED (see answer).
func (b *Broker) forwardCall(o source, dest dest, v *hotpath.View, s *subject, k callKind, deadline time.Time, h *held, load *atomic.Int64, keep func(*sendq.Frame) *chooseAgain) *refusal {
	// A link carries the calls of all the other broker's nodes, each
	// bounded there.
	if !o.fromLink && o.e.inflight.Load() >= int64(b.opts.MaxInflight) {
		return b.tooManyCalls()
	}
	fw, r := o.e.forwarding(o.from, v, true)
	if r != nil {
		return r
	}
	defer fw.release()
	if !dest.fits(fw) {
		return rejectf("the message is over the NATS payload limit between brokers (%d bytes)", b.bus.maxPayload())
	}
	var again *chooseAgain
	if keep != nil {
		again = keep(fw.frame())
	}
	if !b.pend.add(dest, s.id, &call{kind: k, origin: o.d, deadline: deadline, sent: o.e.requestStamp(), load: load, again: again}) {
		return rejectf("a %s with this id is already open", kindNames[s.kind])
	}
	n, ok := dest.put(h, fw, deadline, false)
	if !ok {
		b.pend.cancel(dest, s.id, k)
		return refuse(wire.ResultOverload, dest.ep().node+" is not keeping up (its queue is full)")
	}
	o.e.countOut(callMsgKinds[k], n)
	return nil
}

func (b *Broker) tooManyCalls() *refusal {
	return refuse(wire.ResultOverload, "too many open calls on this connection (limit "+strconv.Itoa(b.opts.MaxInflight)+")")
}

// resolve finds the connection of a target for a message of n. A bare
// name is a service in the registry (docs/discovery.md#targets): one live
// instance is its node; several are ambiguous, unless all declare one
// group, whose members share it (groups.go); none falls back to the node
// of that name, so every node stays reachable by its name. It returns the
// node name and its connection, nil when not connected. On a bus a node
// on another broker resolves to the link to that broker, unless
// localOnly (what a link brought is for this broker's nodes: it never
// travels on).
func (b *Broker) resolve(to string, localOnly bool, n need) (target, *refusal) {
	t, err := wire.ParseTarget(to)
	if err != nil {
		return target{}, rejectf("%v", err)
	}
	var node string
	switch t.Kind {
	case wire.TargetCrossMesh:
		return target{}, rejectf("%v", wire.ErrCrossMesh)
	case wire.TargetService:
		locals := b.reg.instances(t.Service)
		var remote []member
		if !localOnly {
			remote = b.bus.serviceMembers(t.Service)
		}
		switch len(locals) + len(remote) {
		case 0:
			node = t.Service
		case 1:
			if len(locals) == 1 {
				return target{node: locals[0].c.node, dest: locals[0].c}, nil
			}
			node = remote[0].node
		default:
			if g := groupOf(locals, remote); g != "" {
				return b.pickMember(t.Service, g, locals, remote, n, nil)
			}
			nodes := make([]string, 0, len(locals)+len(remote))
			for _, m := range remote {
				nodes = append(nodes, m.node)
			}
			for _, in := range locals {
				nodes = append(nodes, in.c.node)
			}
			slices.Sort(nodes)
			return target{}, refuse(wire.ResultAmbiguous, fmt.Sprintf("service %q has %d live instances (on %s): address one as %s.<node>.bus, or give them one group",
				t.Service, len(nodes), strings.Join(nodes, ", "), t.Service))
		}
	default:
		node = t.Addr.Node
	}
	if c := b.dir.lookup(node); c != nil {
		return target{node: node, dest: c}, nil
	}
	if localOnly {
		return target{node: node}, nil
	}
	if rn, ok := b.bus.remoteNode(node); ok {
		return target{node: node, dest: b.bus.linkTo(rn.Broker)}, nil
	}
	return target{node: node}, nil
}

// deliverPublish fans an event out to the broker and every connected node
// permitted to receive the channel, the publisher included
// (docs/messaging.md#results), and answers with one result per candidate
// once every candidate answered or the deadline passed.
func (b *Broker) deliverPublish(c *conn, v *hotpath.View, s subject) *refusal {
	deadline, r := b.admit(&c.endpoint, v, s.command)
	if r == nil {
		r = permit(c, auth.ActionPublish, s.command)
	}
	if r != nil {
		return r
	}
	if c.inflight.Load() >= int64(b.opts.MaxInflight) {
		return b.tooManyCalls()
	}
	cands := b.candidates(s.command)
	// On a bus the candidates of every broker count (publishFromLink
	// delivers them there); this broker, the publisher's, is the one
	// broker that is a candidate itself.
	selfConnected := b.dir.lookup(b.opts.Name) != nil
	remote := b.bus.publishCandidates(s.command)
	n := len(cands)
	for _, nodes := range remote {
		n += len(nodes)
	}
	if !selfConnected {
		n++ // the broker is a candidate even with no code embedded
	}
	if n > MaxPublishCandidates {
		return rejectf("publication would reach %d nodes, more than %d", n, MaxPublishCandidates)
	}
	pub := &publication{origin: c, id: s.id, deadline: deadline}
	if !selfConnected {
		pub.results = append(pub.results, wire.NodeResult{Node: b.opts.Name, Result: wire.NoSubscriber})
	}
	for _, nodes := range remote {
		for _, node := range nodes {
			pub.results = append(pub.results, wire.NodeResult{Node: node})
			pub.remaining++
		}
	}
	subscribed := subscribedOf(cands, s.command)
	// A queue's members not given the event read NO_SUBSCRIBER.
	deliver, choice := b.shareQueues(s.command, subscribed, len(remote) > 0)
	pub.resultsHere(cands, subscribed, deliver)
	if pub.remaining == 0 {
		b.sendPublished(pub)
		return nil
	}
	f, r := frameFrom(c.addr, v, true)
	if r != nil {
		return r
	}
	defer f.Release()
	var lf linkFrames
	if len(remote) > 0 {
		if lf, r = newLinkFrames(v, f, choice); r != nil {
			return r
		}
		defer lf.release()
	}
	b.pend.openPub(pub, time.Now(), func() { b.timeOutPub(pub) })
	b.scatter(c, pub, remote, &lf)
	b.publishHere(pub, deliver, f)
	return nil
}

// subscribedOf returns the nodes of cands subscribed to channel, in
// cands' order.
func subscribedOf(cands []*conn, channel string) []*conn {
	var out []*conn
	for _, d := range cands {
		if d.hasSub(channel) {
			out = append(out, d)
		}
	}
	return out
}

// resultsHere adds a result to pub for each of this broker's
// candidates: to come from those it is delivered to, NO_SUBSCRIBER for
// the others (not subscribed, or a queue's members not chosen).
func (pub *publication) resultsHere(cands, subscribed, deliver []*conn) {
	var given map[*conn]bool // when queues left some out
	if len(deliver) != len(subscribed) {
		given = make(map[*conn]bool, len(deliver))
		for _, d := range deliver {
			given[d] = true
		}
	}
	for i, j := 0, 0; i < len(cands); i++ {
		d := cands[i]
		res := wire.NodeResult{Node: d.node}
		subbed := j < len(subscribed) && subscribed[j] == d // subscribed keeps cands' order
		if subbed {
			j++
		}
		if subbed && (given == nil || given[d]) {
			pub.remaining++
		} else {
			res.Result = wire.NoSubscriber
		}
		pub.results = append(pub.results, res)
	}
}

// publishHere opens pub's call towards each node of deliver and queues
// f for it; a node that cannot take it has its result at once.
func (b *Broker) publishHere(pub *publication, deliver []*conn, f *sendq.Frame) {
	for _, d := range deliver {
		switch {
		case !b.pend.add(d, pub.id, &call{kind: callPublish, origin: pub.origin, deadline: pub.deadline, pub: pub}):
			b.recordPub(pub, d.node, wire.Rejected)
		case !d.out.EnqueueFrame(f, pub.deadline):
			b.pend.cancel(d, pub.id, callPublish)
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

// routeResponse forwards a node's response to the call it answers. A
// response that matches no open call (late, or forged) is dropped and
// counted.
func (b *Broker) routeResponse(c *conn, v *hotpath.View, h *held) {
	id := v.Value(wire.HeaderReplyTo)
	cl := b.pend.take(c, id, callRequest)
	if cl == nil {
		b.stats.drop(DropUnmatchedAnswer)
		return
	}
	if cl.again != nil {
		cl.again.f.Release()
	}
	if b.replyTooLarge(&c.endpoint, cl, id, v) {
		return
	}
	if !resultAllowed(c, v) { // a broker's results are its own to give
		// A View of its own (allocated here, on this rare path: the
		// forward below keeps it with the frames it may queue).
		nv := normalizeResult(c, v, c.addr, new(hotpath.View))
		if nv == nil {
			// Fail closed: never forward a result the node may not claim.
			b.answer(cl.origin, failedResponse(id, v), refuse(wire.ResultHandler, c.node+"'s reply is too large once stamped"))
			return
		}
		v = nv
	}
	b.passResponse(&c.endpoint, c.addr, cl, id, v, h)
}

// replyTooLarge tells the requester of call cl (its id) that the reply v
// read from e is over the payload limit, and reports whether it was.
func (b *Broker) replyTooLarge(e *endpoint, cl *call, id string, v *hotpath.View) bool {
	n := len(v.Body())
	if n <= b.opts.MaxPayload {
		return false
	}
	s := failedResponse(id, v)
	b.logRefused(e, "reply", s.command, "reply payload over the limit")
	b.answer(cl.origin, s, refuse(wire.ResultHandler,
		e.node+" replied with "+strconv.Itoa(n)+" bytes, over the limit of "+strconv.Itoa(b.opts.MaxPayload)))
	return true
}

// failedResponse is the subject of the request whose response v (to id)
// cannot pass, for what the requester is told; built only then (its
// strings are clones of the read buffer's).
func failedResponse(id string, v *hotpath.View) subject {
	s := subject{kind: kindRequest, id: strings.Clone(id)}
	if v != nil {
		s.command = strings.Clone(v.Value(wire.HeaderCommand))
	}
	return s
}

// passResponse forwards the response v, from the address from and read
// from e, to the requester of call cl (its id), or tells the requester
// why it cannot pass. Its payload passed replyTooLarge.
func (b *Broker) passResponse(e *endpoint, from string, cl *call, id string, v *hotpath.View, h *held) {
	fw, r := e.forwarding(from, v, false)
	defer fw.release()
	if r != nil {
		b.answer(cl.origin, failedResponse(id, v), refuse(wire.ResultHandler, e.node+"'s reply is too large once stamped"))
		return
	}
	if !cl.origin.fits(fw) {
		b.answer(cl.origin, failedResponse(id, v), refuse(wire.ResultHandler, e.node+"'s reply is over the NATS payload limit between brokers"))
		return
	}
	if n, ok := cl.origin.put(h, fw, time.Time{}, false); !ok {
		b.stats.drop(DropAnswerUndeliverable)
	} else {
		e.countOut(MsgResponse, n)
		b.answered(cl, v)
	}
}

// resultAllowed reports whether a response from c may pass with the
// result it carries: a node may only report that it has no handler, is
// overloaded, or that its handler failed, and only with an error rc. It
// may not pass its failure off as the broker's (a DISCONNECT or TIMEOUT
// it never had). A node an edge adapter logs in (DialInProcessAs) speaks
// for a peer of another protocol, whose own failures it reports as they
// are (edgeResultKind).
func resultAllowed(c *conn, v *hotpath.View) bool {
	res, ok := v.Get(wire.HeaderResult)
	if !ok {
		return true
	}
	if resultAllowedKind(c, wire.Result(res)) {
		rc, err := wire.ParseRC(v.Value(wire.HeaderRC))
		return err == nil && rc.IsError()
	}
	return false
}

// normalizeResult rewrites a response whose result is not allowed: a
// success loses its result, a failure's becomes HANDLER_FAILED. It is the
// rare path, so it decodes and re-encodes; the result is parsed into into.
func normalizeResult(c *conn, v *hotpath.View, from string, into *hotpath.View) *hotpath.View {
	m, err := v.Message()
	if err != nil { // cannot happen: v parsed
		return nil
	}
	m.Set(wire.HeaderFrom, from) // measured as it will be sent
	if !wire.ResponseRC(m).IsError() {
		m.Del(wire.HeaderResult)
	} else if !resultAllowedKind(c, wire.Result(m.Value(wire.HeaderResult))) {
		m.Set(wire.HeaderResult, string(wire.ResultHandler))
	}
	if err := hotpath.ParseView(m.ToBytes(), into); err != nil {
		return nil // too large once corrected: the caller fails the call
	}
	return into
}

func resultAllowedKind(c *conn, r wire.Result) bool {
	return r == wire.ResultNoHandler || r == wire.ResultOverload || r == wire.ResultHandler ||
		(c.as != nil && edgeResultKind(r))
}

// edgeResultKind: the request error kinds an edge's node may claim
// besides a node's, those its peer's protocol has (MoonBridge's
// TIMED_OUT, REJECTED, NOT_CONNECTED, PROTOCOL_ERROR). The answer's from
// still names the node.
func edgeResultKind(r wire.Result) bool {
	return r == wire.ResultTimeout || r == wire.ResultRejected || r == wire.ResultNotConnected || r == wire.ResultProtocol
}

// routeReceipt forwards a destination's receipt to the sender, or records
// it in its publication.
func (b *Broker) routeReceipt(c *conn, v *hotpath.View) {
	claimable := nodeReceiptResults[:]
	if c.as != nil {
		claimable = edgeReceiptResults[:]
	}
	b.takeReceipt(c, v, claimable, c.addr)
}

// takeReceipt closes the call d's receipt v answers with a result of
// claimable, and passes it on from the address from; an empty from is
// the receipt's own (a link's: the node on the other broker it is about).
func (b *Broker) takeReceipt(d dest, v *hotpath.View, claimable []wire.Result, from string) {
	id := v.Value(wire.HeaderReplyTo)
	cl := b.pend.take(d, id, callReceipt, callPublish)
	if cl == nil {
		b.stats.drop(DropUnmatchedAnswer)
		return
	}
	// Only what the sender may report. The constant, not the header:
	// that aliases the read buffer.
	r := wire.Failed
	for _, ok := range claimable {
		if v.Value(wire.HeaderResult) == string(ok) {
			r = ok
		}
	}
	switch cl.kind {
	case callReceipt:
		if from == "" {
			from = strings.Clone(v.Value(wire.HeaderFrom))
		}
		b.sendReceipt(cl.origin, strings.Clone(id), from, r)
	case callPublish:
		b.recordPub(cl.pub, d.ep().node, r)
	}
}

// The receipt results a node may report, and those a broker may.
var (
	nodeReceiptResults = [...]wire.Result{wire.Accepted, wire.NoSubscriber, wire.Backpressured, wire.Rejected}
	// A node an edge adapter logs in reports its peer's results as they
	// are (a MoonBridge backend's, whose protocol has them all).
	edgeReceiptResults = [...]wire.Result{wire.Accepted, wire.NoSubscriber, wire.Backpressured, wire.Rejected,
		wire.NotConnected, wire.TimedOut, wire.Failed}
	brokerReceiptResults = [...]wire.Result{wire.Accepted, wire.NoSubscriber, wire.Backpressured, wire.Rejected,
		wire.NotConnected, wire.TimedOut, wire.Failed}
)

// sendReceipt tells to the result of its send id; from is the node the
// result is about, when known.
func (b *Broker) sendReceipt(to dest, id, from string, r wire.Result) {
	m := wire.New(wire.TypeResponse, wire.CmdReceipt).
		WithHeader(wire.HeaderReplyTo, id).
		WithHeader(wire.HeaderResult, string(r))
	if from != "" {
		m.Set(wire.HeaderFrom, from)
	}
	b.traffic.receipts.add(r)
	b.post(to, m)
}
