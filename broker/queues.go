package broker

// Queue subscriptions (docs/messaging.md#queue-subscriptions). A
// subscription made as a member of a queue (bus.sub with wire.HeaderQueue)
// shares its channel's events and stream messages with the other members
// of that queue: each goes to one member of each queue (the members of a
// subscription and queue name, taken in turn), and to every subscriber
// outside a queue as before. A node that has a plain subscription
// matching the channel gets the message whatever its queues, and is then
// its queues' choice too (its client gives the message to every matching
// subscription of the node): the queue's other members do not get it. A
// publication's results stay one per candidate node: a member that was
// not given the event reads NO_SUBSCRIBER.
//
// On a bus the broker where a message enters chooses for every queue,
// whichever broker its members are on: it knows the other brokers'
// members from their shares of the directory (NodeInfo.Queues), and
// tells each broker with members which of them it chose, in a header on
// the message it forwards (wire.HeaderQueueChosen). That broker gives the
// message to those members only, and to its subscribers outside any
// queue; it chooses nothing itself, so no two brokers choose for one
// queue. A member the publisher's broker does not know of yet (the
// directory is shared within a snapshot's gap) is not chosen.

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// checkQueue refuses a queue the broker cannot keep.
func (b *Broker) checkQueue(cmd, queue string) *refusal {
	switch {
	case cmd != wire.CmdSubscribe:
		return rejectf("only a subscription may name a queue")
	}
	if err := wire.ValidLabel(queue); err != nil {
		return rejectf("queue name: %v", err)
	}
	return nil
}

func queueName(q string) string {
	if q == "" {
		return "outside any queue"
	}
	return "in queue " + q
}

// setQueueLocked records that subscription sub of c is queue's member
// ("": none). c.mu held.
func (c *conn) setQueueLocked(sub, queue string) {
	if queue == "" {
		if _, ok := c.queues[sub]; ok {
			delete(c.queues, sub)
			c.queued.Add(-1)
		}
		return
	}
	if c.queues == nil {
		c.queues = map[string]string{}
	}
	if _, ok := c.queues[sub]; !ok {
		c.queued.Add(1)
	}
	c.queues[sub] = queue
}

// queueKeys returns, for channel, whether c has a plain subscription
// matching it, and the queue groups (subscription and queue) it is a
// member of that match it.
func (c *conn) queueKeys(channel string, keys []string) (plain bool, _ []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sub := range c.subs {
		if sub != channel && !(auth.IsPattern(sub) && auth.Pattern(sub).Match(channel)) {
			continue
		}
		if q, ok := c.queues[sub]; ok {
			keys = append(keys, sub+"\x00"+q)
		} else {
			plain = true
		}
	}
	return plain, keys
}

// queueMember is a member of a queue group that may be chosen: a node of
// this broker (d) or of another broker.
type queueMember struct {
	node   string
	broker string // another broker's; "" with d
	d      *conn
}

// queueChoice is what the publisher's broker chose on the other brokers
// for one message: for each broker with a member of a queue of the
// channel, its members chosen, joined by commas ("": none, and it still
// tells that broker so). Nil when no other broker has a member.
type queueChoice map[string]string

// shareQueues returns, of ds (this broker's subscribers of channel), those
// the message goes to: every one with a plain subscription matching
// channel, and the member of each queue group chosen, in turn among the
// members of the whole bus when bus is set (then the choice on the other
// brokers is returned too). ds is returned as it is, with nothing
// allocated, when no member of any queue matches.
func (b *Broker) shareQueues(channel string, ds []*conn, bus bool) ([]*conn, queueChoice) {
	var remote []remoteMember
	if bus {
		remote = b.bus.queueMembers(channel)
	}
	if len(remote) == 0 && !slices.ContainsFunc(ds, func(d *conn) bool { return d.queued.Load() > 0 }) {
		return ds, nil
	}
	keep := make([]*conn, 0, len(ds))
	groups := map[string][]queueMember{}
	served := map[string]bool{} // queue groups with a member that gets it anyway
	var keys []string
	for _, d := range ds {
		if d.queued.Load() == 0 {
			keep = append(keep, d)
			continue
		}
		var plain bool
		plain, keys = d.queueKeys(channel, keys[:0])
		if plain {
			keep = append(keep, d)
		}
		for _, k := range keys {
			switch {
			case plain:
				served[k] = true
			case d.allows(auth.ActionSubscribe, channel):
				groups[k] = append(groups[k], queueMember{node: d.node, d: d})
			}
		}
	}
	var choice queueChoice
	if len(remote) > 0 {
		choice = queueChoice{}
	}
	for _, m := range remote {
		choice[m.broker] += "" // told, even if none of its members is chosen
		for _, k := range m.keys {
			if m.plain {
				served[k] = true
			} else {
				groups[k] = append(groups[k], queueMember{node: m.node, broker: m.broker})
			}
		}
	}
	for key, members := range groups {
		if served[key] {
			continue
		}
		slices.SortFunc(members, func(x, y queueMember) int { return strings.Compare(x.node, y.node) })
		chosen := members[b.groups.turn("q\x00"+key)%uint64(len(members))]
		switch {
		case chosen.d != nil:
			if !slices.Contains(keep, chosen.d) { // a member of two queues may be chosen twice: once
				keep = append(keep, chosen.d)
			}
		case !listed(choice[chosen.broker], chosen.node):
			if choice[chosen.broker] != "" {
				choice[chosen.broker] += ","
			}
			choice[chosen.broker] += chosen.node
		}
	}
	return keep, choice
}

// chosenHere returns, of ds (this broker's subscribers of channel), those
// a message another broker forwarded goes to: every one outside a queue
// or with a plain subscription matching channel, and the queue members
// the publisher's broker chose (chosen, the value of
// wire.HeaderQueueChosen; none without it).
func chosenHere(channel string, ds []*conn, chosen string) []*conn {
	keep := make([]*conn, 0, len(ds))
	var keys []string
	for _, d := range ds {
		if d.queued.Load() > 0 {
			var plain bool
			plain, keys = d.queueKeys(channel, keys[:0])
			if !plain && len(keys) > 0 && !listed(chosen, d.node) {
				continue
			}
		}
		keep = append(keep, d)
	}
	return keep
}

// anyQueued reports whether one of ds is a queue's member.
func anyQueued(ds []*conn) bool {
	return slices.ContainsFunc(ds, func(d *conn) bool { return d.queued.Load() > 0 })
}

// listed reports whether node is in list, names joined by commas.
func listed(list, node string) bool {
	for list != "" {
		var name string
		name, list, _ = strings.Cut(list, ",")
		if name == node {
			return true
		}
	}
	return false
}

// remoteMember is a node of another broker that is a member of a queue
// matching a channel: whether it has a plain subscription matching it
// too, and its queue groups (subscription and queue) for it.
type remoteMember struct {
	node, broker string
	plain        bool
	keys         []string
}

// remoteQueues indexes the other brokers' queue members, for a choice
// that costs a lookup when none of them matches the channel.
type remoteQueues struct {
	members *subIndex[string] // the nodes with queues, by each of their subscriptions
	plain   *subIndex[string] // every broker, by its nodes' subscriptions outside a queue
}

// indexQueues indexes the queue members of nodes (the other brokers'),
// or returns nil when none is a queue's member.
func indexQueues(nodes map[string]shareNode) *remoteQueues {
	var q *remoteQueues
	for name, n := range nodes {
		if len(n.Queues) == 0 {
			continue
		}
		if q == nil {
			q = &remoteQueues{members: newSubIndex[string](), plain: newSubIndex[string]()}
		}
		for _, sub := range n.Subscriptions {
			q.members.add(sub, name)
		}
	}
	if q == nil {
		return nil
	}
	for _, n := range nodes {
		for _, sub := range n.Subscriptions {
			if _, ok := n.Queues[sub]; !ok {
				q.plain.add(sub, n.Broker)
			}
		}
	}
	return q
}

// queueMembers returns the other brokers' nodes permitted to receive
// channel that are members of a queue matching it; nil,
// without allocating, when there are none.
func (cl *cluster) queueMembers(channel string) []remoteMember {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	if cl.queues == nil {
		return nil
	}
	var out []remoteMember
	for _, name := range cl.queues.members.match(channel) {
		n, ok := cl.nodes[name]
		if !ok || cl.b.dir.lookup(name) != nil || !(n.ReceiveAll || n.recv.Allows(auth.ActionSubscribe, channel)) {
			continue // a name held here is this broker's
		}
		m := remoteMember{node: name, broker: n.Broker}
		for _, sub := range n.Subscriptions {
			if sub != channel && !(auth.IsPattern(sub) && auth.Pattern(sub).Match(channel)) {
				continue
			}
			if q, ok := n.Queues[sub]; ok {
				m.keys = append(m.keys, sub+"\x00"+q)
			} else {
				m.plain = true
			}
		}
		if len(m.keys) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// plainSubscribers reports whether broker has a node with a subscription
// outside any queue matching channel. Only asked with queues about.
func (cl *cluster) plainSubscribers(broker, channel string) bool {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	return cl.queues == nil || slices.Contains(cl.queues.plain.match(channel), broker)
}

// The header block of a forwarded frame (hotpath.AppendForward's output:
// the length prefix, the opening delimiter, sorted header lines, the
// closing delimiter, the body).
const frameHeaders = hotpath.PrefixLen + len("---\n")

var closingDelim = []byte("\n---\n")

// headerLine finds the line of header key in forwarded frame b: its span
// [start, end) when found, else start == end where it goes in key order.
func headerLine(b []byte, key string) (start, end int, found bool) {
	i := bytes.Index(b[frameHeaders-1:], closingDelim)
	if i < 0 {
		return frameHeaders, frameHeaders, false // cannot happen: AppendForward wrote it
	}
	hdrEnd := frameHeaders + i
	start = -1
	for p := frameHeaders; p < hdrEnd; {
		n := bytes.IndexByte(b[p:hdrEnd], '\n') + 1
		k, _, _ := bytes.Cut(b[p:p+n], []byte(": "))
		switch {
		case string(k) == key:
			return p, p + n, true
		case start < 0 && string(k) > key:
			start = p
		}
		p += n
	}
	if start < 0 {
		start = hdrEnd
	}
	return start, start, false
}

// headerValue is the value of the header line b[start:end].
func headerValue(b []byte, start, end int, key string) string {
	return string(b[start+len(key)+len(": ") : end-1])
}

// withHeader returns a copy of forwarded frame f with the line key: value
// inserted at at (headerLine's place for it).
func withHeader(f *sendq.Frame, at int, key, value string) *sendq.Frame {
	g := sendq.NewFrame()
	g.B = append(g.B, f.B[:at]...)
	g.B = append(g.B, key...)
	g.B = append(g.B, ": "...)
	g.B = append(g.B, value...)
	g.B = append(g.B, '\n')
	g.B = append(g.B, f.B[at:]...)
	binary.BigEndian.PutUint32(g.B, uint32(len(g.B)-hotpath.PrefixLen))
	g.TTLOff = f.TTLOff
	if f.TTLOff >= at {
		g.TTLOff += len(g.B) - len(f.B)
	}
	return g
}

// cutLine removes the line b[start:end] from forwarded frame f, which
// nothing else holds yet.
func cutLine(f *sendq.Frame, start, end int) {
	f.B = append(f.B[:start], f.B[end:]...)
	binary.BigEndian.PutUint32(f.B, uint32(len(f.B)-hotpath.PrefixLen))
	if f.TTLOff >= end {
		f.TTLOff -= end - start
	}
}

// takeChosen reads and removes HeaderQueueChosen from a frame another
// broker forwarded (its nodes never see it): the members chosen here, and
// whether the header was there.
func takeChosen(f *sendq.Frame) (string, bool) {
	start, end, found := headerLine(f.B, wire.HeaderQueueChosen)
	if !found {
		return "", false
	}
	chosen := headerValue(f.B, start, end, wire.HeaderQueueChosen)
	cutLine(f, start, end)
	return chosen, true
}

// goneChosen counts the members listed in chosen that are not in kept
// (chosenHere's result): they left before the choosing broker knew.
func goneChosen(chosen string, kept []*conn) int {
	n := 0
	for chosen != "" {
		var name string
		name, chosen, _ = strings.Cut(chosen, ",")
		if !slices.ContainsFunc(kept, func(d *conn) bool { return d.node == name }) {
			n++
		}
	}
	return n
}

// errQueueChosenHeader refuses a node's message that carries the brokers'
// own header.
var errQueueChosenHeader = rejectf("the %s header is for brokers: a node may not send it", wire.HeaderQueueChosen)

// linkFrames makes, for a message f forwarded to other brokers, the
// frame of each broker choice tells (f with its choice in
// HeaderQueueChosen); the others take f. It refuses f when its sender set
// that header itself. v is the message as read: a frame whose headers a
// View keeps all (hotpath.View.Others) cannot have it, and f is scanned
// only for the others, or to place the header (the scan was a tenth of
// the sending broker's CPU on a stream across brokers). Release the
// frames with release.
type linkFrames struct {
	f      *sendq.Frame
	choice queueChoice
	at     int
	made   map[string]*sendq.Frame
}

func newLinkFrames(v *hotpath.View, f *sendq.Frame, choice queueChoice) (linkFrames, *refusal) {
	lf := linkFrames{f: f, choice: choice}
	if !v.Others() && len(choice) == 0 {
		return lf, nil
	}
	at, _, found := headerLine(f.B, wire.HeaderQueueChosen)
	if found {
		return linkFrames{}, errQueueChosenHeader
	}
	lf.at = at
	return lf, nil
}

// frame is broker's frame.
func (lf *linkFrames) frame(broker string) *sendq.Frame {
	chosen, ok := lf.choice[broker]
	if !ok {
		return lf.f
	}
	if g := lf.made[broker]; g != nil {
		return g
	}
	if lf.made == nil {
		lf.made = map[string]*sendq.Frame{}
	}
	g := withHeader(lf.f, lf.at, wire.HeaderQueueChosen, chosen)
	lf.made[broker] = g
	return g
}

func (lf *linkFrames) release() {
	for _, g := range lf.made {
		g.Release()
	}
}
