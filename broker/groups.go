package broker

// Service groups (docs/discovery.md#service-groups). Instances of a
// service that all declare one group share what is addressed to the bare
// service name: a request goes to the member with the fewest requests
// outstanding, ties taken in turn, across every broker of a bus. A member
// that cannot take it (gone, its queue past its pace mark, no handler or
// no permission for the channel) is skipped before anything is sent; a
// request sent is never sent again to another member (a member that
// disconnects fails it, DISCONNECT).
//
// Outstanding is counted where the choice is made: a node of this broker
// by the requests open towards its connection; a member on another broker
// by this broker's requests open towards that broker for the service,
// shared among its members there. That broker, given the bare service
// name, picks among its own members the same way.

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"busbar/auth"
	"busbar/internal/sendq"
	"busbar/wire"
)

// member is an instance of a service on another broker.
type member struct {
	node, broker, group string
}

// need is what a target must take: a request (a handler of channel) or
// an event (a subscriber of channel).
type need struct {
	channel string
	request bool
}

// target is where a message goes: its node, the connection it goes on
// (nil: not connected), and, for a request, the count of outstanding
// requests it joins while open.
type target struct {
	node string
	dest dest // nil: not connected
	load *atomic.Int64
	// A group's member on another broker: that broker may still refuse
	// it unsent (chooseAgain).
	remoteMember bool
}

// groups keeps what the choice among members needs between messages,
// and what it chose.
type groups struct {
	mu     sync.Mutex
	turns  map[string]*atomic.Uint64 // whose turn it is, per service group or queue group
	remote map[string]*atomic.Int64  // by broker "/" service: this broker's requests open there
	sent   map[GroupMember]*int64    // requests sent to each member, by this broker
}

// GroupMember names a member of a service group.
type GroupMember struct {
	Service, Group, Node string
}

// GroupRequests is how many requests this broker sent to a member of a
// service group through the bare service name (docs/discovery.md#service-groups).
type GroupRequests struct {
	GroupMember
	Requests int64
}

// maxTurns bounds the groups whose turn is kept; past it every turn
// starts again (harmless: a turn only spreads ties).
const maxTurns = 4096

// turn is the next turn of group key: 0, 1, 2, …
func (g *groups) turn(key string) uint64 {
	g.mu.Lock()
	t := g.turns[key]
	if t == nil {
		if g.turns == nil || len(g.turns) >= maxTurns {
			g.turns = map[string]*atomic.Uint64{}
		}
		t = new(atomic.Uint64)
		g.turns[key] = t
	}
	g.mu.Unlock()
	return t.Add(1) - 1
}

// chose counts a request sent to member m.
func (g *groups) chose(m GroupMember) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.sent[m]
	if n == nil {
		if g.sent == nil {
			g.sent = map[GroupMember]*int64{}
		}
		// Stored once, with a key of its own: the service is the
		// request's target, which aliases the read buffer (and a map
		// assignment would store the key it is given again).
		m.Service = strings.Clone(m.Service)
		n = new(int64)
		g.sent[m] = n
	}
	*n++
}

// GroupRequests returns, for every live member of a service group on the
// bus, the requests this broker sent it through the group, sorted by
// service and node. Members gone are forgotten.
func (b *Broker) GroupRequests() []GroupRequests {
	live := map[GroupMember]bool{}
	for _, s := range b.services("") {
		if s.Group != "" {
			live[GroupMember{s.Service, s.Group, s.Provenance.Node}] = true
		}
	}
	g := &b.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]GroupRequests, 0, len(live))
	for m := range live {
		var n int64
		if p := g.sent[m]; p != nil {
			n = *p
		}
		out = append(out, GroupRequests{m, n})
	}
	for m := range g.sent {
		if !live[m] {
			delete(g.sent, m)
		}
	}
	slices.SortFunc(out, func(a, b GroupRequests) int {
		return strings.Compare(a.Service+"\x00"+a.Node, b.Service+"\x00"+b.Node)
	})
	return out
}

// remoteLoad is this broker's count of requests open towards broker for
// service.
func (g *groups) remoteLoad(broker, service string) *atomic.Int64 {
	key := broker + "/" + service
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.remote == nil {
		g.remote = map[string]*atomic.Int64{}
	}
	l := g.remote[key]
	if l == nil {
		l = new(atomic.Int64)
		g.remote[key] = l
	}
	return l
}

// forget drops the counts of the services no broker announces any more
// (the cluster's index, on every change): what is open still counts
// down on the dropped counter, harmlessly.
func (g *groups) forget(live func(broker, service string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, l := range g.remote {
		broker, service, _ := strings.Cut(key, "/")
		if l.Load() <= 0 && !live(broker, service) {
			delete(g.remote, key)
		}
	}
}

// groupOf is the group every instance shares, or "" when they do not
// all declare one.
func groupOf(locals []*instance, remote []member) string {
	var g string
	switch {
	case len(locals) > 0:
		g = locals[0].info.Group
	case len(remote) > 0:
		g = remote[0].group
	}
	if g == "" {
		return ""
	}
	for _, in := range locals {
		if in.info.Group != g {
			return ""
		}
	}
	for _, m := range remote {
		if m.group != g {
			return ""
		}
	}
	return g
}

// pickMember chooses the member of group that takes a message of n:
// the fewest outstanding, ties in turn. It refuses when none can take it.
func (b *Broker) pickMember(service, group string, locals []*instance, remote []member, n need, tried []string) (target, *refusal) {
	type cand struct {
		t       target
		members int64 // the load is shared by this many (a broker's members)
	}
	cands := make([]cand, 0, len(locals)+len(remote))
	skipped := map[string]string{} // why members were skipped, by reason
	for _, in := range locals {
		c := in.c
		if why := b.cannotTake(c, n); why != "" {
			skipped[why] += " " + c.node
			continue
		}
		cands = append(cands, cand{target{node: c.node, dest: c, load: &c.openRequests}, 1})
	}
	perBroker := map[string]int64{}
	for _, m := range remote {
		perBroker[m.broker]++
	}
	for _, m := range remote {
		if slices.Contains(tried, m.broker) {
			skipped["refused by its broker"] += " " + m.node
			continue
		}
		l := b.bus.linkTo(m.broker)
		if l == nil {
			skipped["gone"] += " " + m.node
			continue
		}
		if rn, ok := b.bus.remoteNode(m.node); !ok || rn.Broker != m.broker {
			skipped["gone"] += " " + m.node
			continue
		} else if n.request && !slices.Contains(rn.Handlers, n.channel) {
			skipped["no handler for "+n.channel] += " " + m.node
			continue
		}
		cands = append(cands, cand{target{node: m.node, dest: l, load: b.groups.remoteLoad(m.broker, service), remoteMember: true}, perBroker[m.broker]})
	}
	if len(cands) == 0 {
		text := "no member of group " + group + " of service " + service + " can take it:"
		for why, nodes := range skipped {
			text += " " + why + " (" + nodes[1:] + ");"
		}
		res := wire.ResultNoHandler
		if !n.request {
			res = wire.NoSubscriber
		}
		if _, full := skipped["overloaded"]; full && len(skipped) == 1 {
			res = wire.ResultOverload
		}
		return target{}, refuse(res, text[:len(text)-1])
	}
	// Fewest outstanding per member first; from whose turn it is, so ties
	// go round.
	start := int(b.groups.turn("s\x00"+service) % uint64(len(cands)))
	best := -1
	var bestLoad, bestMembers int64
	for i := range cands {
		c := &cands[(start+i)%len(cands)]
		load := c.t.load.Load()
		if best < 0 || load*bestMembers < bestLoad*c.members {
			best, bestLoad, bestMembers = (start+i)%len(cands), load, c.members
		}
	}
	if n.request {
		b.groups.chose(GroupMember{service, group, cands[best].t.node})
	}
	return cands[best].t, nil
}

// cannotTake says why c, a member on this broker, is skipped for a
// message of n, or "".
func (b *Broker) cannotTake(c *conn, n need) string {
	switch {
	case c.out.Closing():
		return "gone"
	case n.request && (!c.allows(auth.ActionHandle, n.channel) || !c.hasHandler(n.channel)):
		return "no handler for " + n.channel
	case !n.request && (!c.allows(auth.ActionSubscribe, n.channel) || !c.hasSub(n.channel)):
		return "no subscriber of " + n.channel
	}
	msgs, bytes := c.out.Depth()
	if 4*msgs >= 3*b.opts.MaxQueueMessages || 4*bytes >= 3*b.opts.MaxQueueBytes { // past its pace mark
		return "overloaded"
	}
	return ""
}

// maxChooseAgain bounds how many brokers a group's request is sent to when
// each in turn refuses it unsent.
const maxChooseAgain = 2

// chooseAgain is what a group's request sent to a member on another
// broker keeps, so the member can be chosen again if that broker refuses
// it before any member saw it: its own members were gone (it knew before
// this broker did), it answers NO_HANDLER from itself. The request was
// never sent to a member, so sending it to another is no replay (seed
// 003). The frame is this broker's copy of what it forwarded.
type chooseAgain struct {
	service, channel string
	tried            []string // the brokers that refused it
	f                *sendq.Frame
}

// keepForAgain returns what a request forwarded as f to t, a group's
// member on another broker, keeps; nil for any other target.
func keepForAgain(t target, service, channel string, f *sendq.Frame) *chooseAgain {
	if !t.remoteMember {
		return nil
	}
	g := sendq.NewFrame() // pooled: nothing allocated in steady state
	g.B, g.TTLOff = append(g.B, f.B...), f.TTLOff
	return &chooseAgain{service: strings.Clone(service), channel: strings.Clone(channel), f: g}
}

// sendAgain tries, once another broker (peer) refused the group's request
// cl unsent, another member; it reports whether the request is on its way
// again (then the refusal is not passed on). The kept frame goes with the
// new call, or is released.
func (b *Broker) sendAgain(cl *call, id, peer string) bool {
	ag := cl.again
	ag.tried = append(ag.tried, peer)
	if len(ag.tried) > maxChooseAgain {
		return false
	}
	locals := b.reg.instances(ag.service)
	remote := b.bus.serviceMembers(ag.service)
	g := groupOf(locals, remote)
	if g == "" {
		return false
	}
	t, r := b.pickMember(ag.service, g, locals, remote, need{channel: ag.channel, request: true}, ag.tried)
	if r != nil || t.dest == nil {
		return false
	}
	load := t.load
	if load == nil {
		load = t.dest.requestLoad()
	}
	next := &call{kind: callRequest, origin: cl.origin, deadline: cl.deadline, sent: cl.sent, load: load}
	if t.remoteMember {
		next.again = ag
	}
	id = strings.Clone(id)
	if !b.pend.add(t.dest, id, next) {
		return false
	}
	if !t.dest.ep().out.EnqueueFrame(ag.f, cl.deadline) {
		b.pend.cancel(t.dest, id, callRequest)
		return false
	}
	if next.again == nil {
		ag.f.Release() // the queue holds its own reference
	}
	b.log.Debug("group request refused unsent by the member's broker; sent to another member", "service", ag.service, "refused_by", peer, "member", t.node)
	return true
}
