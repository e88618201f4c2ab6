package broker

import (
	"strings"
	"time"

	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// What a link to another broker brings in is routed from one entry,
// dispatchLink: the frames that broker's nodes sent to this broker's
// nodes, and the answers to the calls this broker opened towards it. The
// other broker admitted and permitted them for its node, stamped that
// node's address as from (take checked that it may claim it) and, for a
// queue, chose the member; here they are only delivered, to this
// broker's nodes: nothing a link brings travels on to a third broker.
// The answers go back through the link (a dest, like any node's
// connection), keyed by it in the pending table.

// dispatchLink routes one frame the link l brought, parsed into v; what
// it queues for nodes is held in h, when h is not nil, until h.flush.
func (b *Broker) dispatchLink(l *link, v *hotpath.View, h *held) {
	l.countIn(v, v.Len())
	defer l.dispatched()
	if v.IsHeartbeat() {
		return
	}
	cmd := v.Value(wire.HeaderCommand)
	switch cmd { // take let no other bus.* command through
	case wire.CmdReceipt:
		b.takeReceipt(l, v, brokerReceiptResults[:], "")
		return
	case wire.CmdPublished:
		b.routePeerPublished(l, v)
		return
	}
	if b.taps.list.Load() != nil {
		b.tap(v.Value(wire.HeaderFrom), v, cmd)
	}
	switch v.Value(wire.HeaderType) {
	case wire.TypeStream:
		b.streamFromLink(l, v, cmd, h)
	case wire.TypeEvent:
		if _, ok := v.Get(wire.HeaderTo); ok {
			b.callFromLink(l, v, cmd, kindSend, h)
		} else {
			b.callFromLink(l, v, cmd, kindPublish, h)
		}
	case wire.TypeRequest:
		b.callFromLink(l, v, cmd, kindRequest, h)
	case wire.TypeResponse:
		b.responseFromLink(l, v, h)
	default:
		b.stats.drop(DropPeerRefused)
	}
}

// streamFromLink delivers another broker's stream message to this
// broker's subscribers of its channel (or its target's), that broker's
// choice of the queues' members holding.
func (b *Broker) streamFromLink(l *link, v *hotpath.View, channel string, h *held) {
	deadline, r := b.admit(&l.endpoint, v, channel)
	if r != nil {
		b.answer(l, subject{kind: kindStream, command: channel}, r)
		return
	}
	fw, r := l.forwarding(v.Value(wire.HeaderFrom), v, true)
	if r != nil {
		b.answer(l, subject{kind: kindStream, command: channel}, r)
		return
	}
	defer fw.release()
	if to, ok := v.Get(wire.HeaderTo); ok {
		if t, _ := b.resolve(to, true, need{channel: channel}); t.dest != nil && t.dest.hasSub(channel) {
			b.streamTo(&l.endpoint, t.dest, fw, channel, deadline, h)
		}
		return
	}
	subs := b.dir.subscribers(channel)
	// The sending broker's choice of this broker's queue members
	// (HeaderQueueChosen) holds, and its header is cut off whoever is
	// given the message, the queue's members gone or not: only a frame
	// with headers a View does not keep can carry it.
	if queued := anyQueued(subs); queued || v.Others() {
		chosen, found := takeChosen(fw.frame())
		if found {
			fw.size = 0 // every node takes the shared frame, the header cut off
		}
		if queued {
			subs = chosenHere(channel, subs, chosen)
		}
		for range goneChosen(chosen, subs) {
			b.stats.drop(DropQueueMemberGone)
		}
	}
	for _, d := range subs {
		b.streamTo(&l.endpoint, d, fw, channel, deadline, h)
	}
}

// callFromLink routes another broker's send, request or publication to
// this broker's node (or nodes). A refusal goes back over the link in the
// form the kind calls for; that broker passes it to its node.
func (b *Broker) callFromLink(l *link, v *hotpath.View, channel string, k kind, h *held) {
	id := v.Value(wire.HeaderID)
	if !validID(id) {
		b.stats.drop(DropPeerRefused) // its broker checked it: nothing to answer
		return
	}
	s := subject{kind: k, id: strings.Clone(id), command: channel}
	o := source{d: l, e: &l.endpoint, from: v.Value(wire.HeaderFrom), fromLink: true}
	var r *refusal
	switch k {
	case kindSend:
		s.from = v.Value(wire.HeaderTo)
		r = b.deliverSend(o, v, &s, h)
	case kindRequest:
		r = b.deliverRequest(o, v, s, v.Value(wire.HeaderTo), h)
	case kindPublish:
		r = b.publishFromLink(l, v, s)
	}
	if r != nil {
		b.answer(l, s, r)
	}
}

// publishFromLink delivers another broker's publication to this broker's
// candidates and answers that broker with their results (it counted
// them, and answers its publisher for every broker's).
func (b *Broker) publishFromLink(l *link, v *hotpath.View, s subject) *refusal {
	deadline, r := b.admit(&l.endpoint, v, s.command)
	if r != nil {
		return r
	}
	cands := b.candidates(s.command)
	pub := &publication{origin: l, id: s.id, deadline: deadline}
	subscribed := subscribedOf(cands, s.command)
	var f *sendq.Frame
	deliver := subscribed
	if anyQueued(subscribed) { // the publisher's broker chose
		if f, r = frameFrom(v.Value(wire.HeaderFrom), v, true); r != nil {
			return r
		}
		defer f.Release()
		chosen, _ := takeChosen(f)
		deliver = chosenHere(s.command, subscribed, chosen)
	}
	pub.resultsHere(cands, subscribed, deliver)
	if pub.remaining == 0 {
		b.sendPublished(pub)
		return nil
	}
	if f == nil {
		if f, r = frameFrom(v.Value(wire.HeaderFrom), v, true); r != nil {
			return r
		}
		defer f.Release()
		takeChosen(f) // a choice made before this broker's members left: its nodes never see it
	}
	b.pend.openPub(pub, time.Now(), func() { b.timeOutPub(pub) })
	b.publishHere(pub, deliver, f)
	return nil
}

// responseFromLink forwards another broker's response (its node's, or
// its own refusal) to the call this broker opened towards the link.
func (b *Broker) responseFromLink(l *link, v *hotpath.View, h *held) {
	id := v.Value(wire.HeaderReplyTo)
	cl := b.pend.take(l, id, callRequest)
	if cl == nil {
		b.stats.drop(DropUnmatchedAnswer)
		return
	}
	if cl.again != nil {
		// Refused unsent by the broker of the group's member chosen
		// (groups.go): another member may take it.
		if v.Value(wire.HeaderFrom) == l.addr && v.Value(wire.HeaderResult) == string(wire.ResultNoHandler) && b.sendAgain(cl, id, l.node) {
			return
		}
		cl.again.f.Release()
	}
	if !b.replyTooLarge(&l.endpoint, cl, id, v) {
		b.passResponse(&l.endpoint, v.Value(wire.HeaderFrom), cl, id, v, h)
	}
}
