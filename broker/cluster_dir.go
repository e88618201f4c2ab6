package broker

// The bus-wide directory: each broker's share (its nodes and services) as
// snapshots over NATS, split into pages that fit the NATS payload limit,
// and the other brokers' shares as this broker last received them.

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/auth"
	"busbar/wire"
)

// clusterPageSlack is what a page keeps free of the NATS payload limit for
// its envelope (broker, generation, part numbers).
const clusterPageSlack = 1 << 10

// sharePage is one page of a broker's share: a snapshot is complete when
// every part of one generation arrived.
type sharePage struct {
	Broker   string             `json:"broker"`
	IID      string             `json:"iid"` // the broker process
	Gen      uint64             `json:"gen"`
	Part     int                `json:"part"`
	Parts    int                `json:"parts"`
	Nodes    []shareNode        `json:"nodes,omitempty"`
	Services []wire.ServiceInfo `json:"services,omitempty"`
	// EdgeKeys are the fingerprints of the keys this broker serves edge
	// protocols with, by protocol (cluster_edgekey.go); on every page.
	EdgeKeys map[string]string `json:"edge_keys,omitempty"`
}

// shareNode is a node as its broker shares it; Since (unix ns, the
// broker's clock) orders two claims of one name (cluster_claim.go).
type shareNode struct {
	wire.NodeInfo
	Since int64 `json:"since"`
	// What the node may receive (its subscribe patterns; all when
	// ReceiveAll), so a publisher's broker counts the candidates of a
	// publication on the whole bus before it sends (cluster_publish.go).
	Receive    []auth.Pattern `json:"receive,omitempty"`
	ReceiveAll bool           `json:"receive_all,omitempty"`

	recv *auth.Permissions // built from Receive by indexLocked
}

type byeMsg struct {
	Broker string `json:"broker"`
	IID    string `json:"iid"`
}

// peer is another broker's share as last received.
type peer struct {
	iid      string
	heard    time.Time // last page or snapshot received
	nodes    map[string]shareNode
	services []wire.ServiceInfo
	// the snapshot being received: its generation and the parts so far
	gen   uint64
	parts []*sharePage
	got   int
	// edgeKeys are its edge protocols' key fingerprints, as its last page
	// named them; warned, the ones of them this broker warned about.
	edgeKeys, warned map[string]string
}

// share is this broker's own nodes and services, as the others see them.
// A connection that is closing (replaced, expired) is no longer shared.
func (b *Broker) share() ([]shareNode, []wire.ServiceInfo) {
	var nodes []shareNode
	for _, c := range b.dir.all() {
		if c.out.Closing() {
			continue
		}
		n := shareNode{NodeInfo: b.nodeInfo(c), Since: c.since.UnixNano(), ReceiveAll: c.perms == nil}
		if c.perms != nil {
			n.Receive = c.perms.Subscribe
		}
		nodes = append(nodes, n)
	}
	return nodes, b.reg.services("")
}

// publishShare sends this broker's share as one snapshot of as many pages
// as the NATS payload limit needs. Only the publisher calls it. Each
// entry is encoded once; a page is the entries' JSON spliced into its
// envelope.
func (cl *cluster) publishShare() {
	nodes, services := cl.b.share()
	budget := cl.maxPayload() - clusterPageSlack
	type page struct{ nodes, services [][]byte }
	var pages []*page
	cur, size := &page{}, 0
	fits := func(raw []byte, err error, what ...any) bool {
		switch {
		case err != nil || len(raw) > budget:
			cl.b.log.Warn("bus: an entry is over the NATS payload limit; not shared", what...)
			return false
		case size > 0 && size+len(raw)+1 > budget:
			pages = append(pages, cur)
			cur, size = &page{}, 0
		}
		size += len(raw) + 1
		return true
	}
	for _, n := range nodes {
		if raw, err := wire.JSON(n); fits(raw, err, "node", n.Node) {
			cur.nodes = append(cur.nodes, raw)
		}
	}
	for _, s := range services {
		if raw, err := wire.JSON(s); fits(raw, err, "service", s.Service, "node", s.Provenance.Node) {
			cur.services = append(cur.services, raw)
		}
	}
	pages = append(pages, cur)
	cl.gen++
	subject := cl.subj.dir + cl.b.opts.Name
	cl.mu.RLock()
	keys, ver := cl.edgeKeysLocked(), cl.edgeVer
	cl.mu.RUnlock()
	for i, p := range pages {
		head, _ := wire.JSON(sharePage{Broker: cl.b.opts.Name, IID: cl.iid, Gen: cl.gen, Part: i, Parts: len(pages), EdgeKeys: keys})
		body := append(head[:len(head)-1:len(head)-1], `,"nodes":[`...)
		body = appendJoined(body, p.nodes)
		body = append(body, `],"services":[`...)
		body = appendJoined(body, p.services)
		body = append(body, "]}"...)
		if err := cl.publish(subject, nil, body); err != nil {
			cl.b.log.Debug("bus: directory not published", "err", err)
			return
		}
	}
	if cl.edgeShared.Load() < ver {
		cl.edgeShared.Store(ver)
		poke(cl.edgeSent)
	}
}

func appendJoined(dst []byte, items [][]byte) []byte {
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, it...)
	}
	return dst
}

// onShare takes a page of another broker's share (NATS's goroutine).
func (cl *cluster) onShare(m *nats.Msg) {
	var p sharePage
	if err := json.Unmarshal(m.Data, &p); err != nil || p.Parts < 1 || p.Part < 0 || p.Part >= p.Parts || p.Broker != sender(m) {
		if err != nil && cl.key == nil && len(m.Data) >= envFixed && (m.Data[0] == envMAC || m.Data[0] == envSealed) {
			// Without a key this broker takes none of a keyed bus's messages.
			cl.b.stats.drop(DropBusKey)
			cl.b.refusals.Warn("bus: a broker of this bus uses a bus key and this one has none (--nats-bus-key); its messages are refused", "", "broker", clip(sender(m)))
			return
		}
		cl.b.log.Warn("bus: malformed directory page ignored", "subject", m.Subject, "err", err)
		return
	}
	if p.Broker == cl.b.opts.Name {
		if p.IID != cl.iid {
			cl.b.log.Error("bus: another broker uses this broker's name; give each broker its own --name", "name", p.Broker)
		}
		return
	}
	now := time.Now()
	cl.mu.Lock()
	pr := cl.peers[p.Broker]
	if pr == nil || pr.iid != p.IID { // new, or restarted
		if pr != nil {
			cl.b.log.Info("bus: broker restarted", "broker", p.Broker)
			// The calls the old process had are lost with it: they fail
			// now (DISCONNECT) rather than at their deadline.
			defer cl.closeLink(p.Broker)
		} else {
			cl.b.log.Info("bus: broker joined", "broker", p.Broker)
		}
		cl.syncState() // it may have missed writes: everyone merges everyone's
		pr = &peer{iid: p.IID, nodes: map[string]shareNode{}}
		cl.peers[p.Broker] = pr
	}
	pr.heard = now
	if diff := cl.heardEdgeKeysLocked(p.Broker, pr, p.EdgeKeys); len(diff) > 0 || len(p.EdgeKeys) > 0 {
		defer poke(cl.edgeHeard)
		for _, d := range diff {
			defer cl.b.log.Error("bus: "+d.Error()+"; the broker that joins with another key refuses to serve it (docs/trueseal.md#the-relay-key-on-a-bus)",
				"proto", d.Proto, "broker", d.Broker, "its_fingerprint", d.Theirs, "this_fingerprint", d.Ours)
		}
	}
	switch {
	case p.Gen < pr.gen:
		cl.mu.Unlock()
		return // a page of an older snapshot, late
	case p.Gen > pr.gen || pr.parts == nil:
		pr.gen, pr.parts, pr.got = p.Gen, make([]*sharePage, p.Parts), 0
	}
	if len(pr.parts) != p.Parts || pr.parts[p.Part] != nil {
		cl.mu.Unlock()
		return
	}
	pr.parts[p.Part] = &p
	pr.got++
	if pr.got < len(pr.parts) {
		cl.mu.Unlock()
		return
	}
	nodes := map[string]shareNode{}
	var services []wire.ServiceInfo
	for _, part := range pr.parts {
		for _, n := range part.Nodes {
			n.Broker = p.Broker // a broker speaks for its own nodes only
			nodes[n.Node] = n
		}
		for _, s := range part.Services {
			s.Provenance.Broker = p.Broker
			services = append(services, s)
		}
	}
	evs := serviceChanges(pr.services, services)
	pr.nodes, pr.services, pr.parts = nodes, services, nil
	cl.indexLocked()
	cl.mu.Unlock()
	cl.b.reg.notifyRemote(evs)
}

// onBye drops a broker that left cleanly.
func (cl *cluster) onBye(m *nats.Msg) {
	var bye byeMsg
	if err := json.Unmarshal(m.Data, &bye); err != nil || bye.Broker != sender(m) {
		return
	}
	cl.mu.Lock()
	pr := cl.peers[bye.Broker]
	gone := pr != nil && pr.iid == bye.IID
	var evs []wire.ServiceEvent
	if gone {
		evs = serviceChanges(pr.services, nil)
		delete(cl.peers, bye.Broker)
		cl.indexLocked()
	}
	cl.mu.Unlock()
	cl.b.reg.notifyRemote(evs)
	if gone {
		cl.b.log.Info("bus: broker left", "broker", bye.Broker)
		cl.closeLink(bye.Broker)
	}
}

// expire drops the brokers not heard from within the lease, and closes
// the links to them: calls waiting on them fail.
func (cl *cluster) expire(now time.Time) {
	var gone []string
	var evs []wire.ServiceEvent
	cl.mu.Lock()
	for name, pr := range cl.peers {
		if now.Sub(pr.heard) > cl.opts.Lease {
			evs = append(evs, serviceChanges(pr.services, nil)...)
			delete(cl.peers, name)
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		cl.indexLocked()
	}
	cl.mu.Unlock()
	cl.b.reg.notifyRemote(evs)
	for _, name := range gone {
		cl.b.log.Warn("bus: broker's lease expired; its nodes are gone", "broker", name, "lease", cl.opts.Lease)
		cl.closeLink(name)
	}
}

// indexLocked rebuilds the lookups routing uses from the peers' shares.
func (cl *cluster) indexLocked() {
	cl.nodes = map[string]shareNode{}
	cl.svcs = map[string][]member{}
	cl.subbers = newSubIndex[string]()
	for _, pr := range cl.peers {
		for name, n := range pr.nodes {
			if o, ok := cl.nodes[name]; !ok || newerClaim(n.Since, n.Broker, o.Since, o.Broker) {
				if !n.ReceiveAll {
					n.recv = &auth.Permissions{Subscribe: n.Receive}
				}
				n.LastSeen = pr.heard
				n.LeaseExpires = pr.heard.Add(cl.opts.Lease)
				cl.nodes[name] = n
			}
		}
	}
	for _, n := range cl.nodes {
		for _, ch := range n.Subscriptions {
			cl.subbers.add(ch, n.Broker)
		}
	}
	cl.queues = indexQueues(cl.nodes)
	for _, pr := range cl.peers {
		for _, s := range pr.services {
			if n, ok := cl.nodes[s.Provenance.Node]; ok && n.Broker == s.Provenance.Broker {
				cl.svcs[s.Service] = append(cl.svcs[s.Service], member{node: s.Provenance.Node, broker: n.Broker, group: s.Group})
			}
		}
	}
	cl.b.groups.forget(func(broker, service string) bool {
		return slices.ContainsFunc(cl.svcs[service], func(m member) bool { return m.broker == broker })
	})
}

// remoteNodes returns the other brokers' nodes: for a name claimed on two
// brokers until the claim settles, only the newer claim.
func (cl *cluster) remoteNodes() map[string]shareNode {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	return maps.Clone(cl.nodes)
}

// remoteNode finds a node on another broker.
func (cl *cluster) remoteNode(name string) (shareNode, bool) {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	n, ok := cl.nodes[name]
	return n, ok
}

// serviceMembers returns the instances on other brokers of service; the
// caller must not modify it.
func (cl *cluster) serviceMembers(service string) []member {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	return cl.svcs[service]
}

// subscribedBrokers returns the other brokers with a subscriber of
// channel, by name or by wildcard pattern; the caller must not modify it.
func (cl *cluster) subscribedBrokers(channel string) []string {
	return cl.indexed(func() []string {
		if cl.subbers == nil {
			return nil
		}
		return cl.subbers.match(channel)
	})
}

// indexed reads an index under the read lock.
func (cl *cluster) indexed(get func() []string) []string {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	return get()
}

// remoteServices returns the other brokers' services.
func (cl *cluster) remoteServices() []wire.ServiceInfo {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	var out []wire.ServiceInfo
	for _, pr := range cl.peers {
		for _, sv := range pr.services {
			if n, ok := cl.nodes[sv.Provenance.Node]; ok && n.Broker == sv.Provenance.Broker {
				out = append(out, sv)
			}
		}
	}
	return out
}

// services is the registry of the whole bus: this broker's instances of
// name (every name when ""), then the other brokers', sorted by service
// and node. A node held here is this broker's, whatever another broker
// still says.
func (b *Broker) services(name string) []wire.ServiceInfo {
	out := b.reg.services(name)
	if !b.bus.joined() {
		return out
	}
	local := map[string]bool{}
	for _, c := range b.dir.all() {
		local[c.node] = true
	}
	return withRemote(out, b.bus.remoteServices(), name, local)
}

// withRemote adds to local the remote instances of name (all when "")
// but those of the nodes in skip, and sorts them. An instance is a
// collision when its name has another live instance anywhere on the bus,
// unless all declare one group (wire.Collide).
func withRemote(local, remote []wire.ServiceInfo, name string, skip map[string]bool) []wire.ServiceInfo {
	out := local
	for _, s := range remote {
		if (name == "" || s.Service == name) && !skip[s.Provenance.Node] {
			out = append(out, s)
		}
	}
	byName := map[string][]*wire.ServiceInfo{}
	for i := range out {
		byName[out[i].Service] = append(byName[out[i].Service], &out[i])
	}
	for _, list := range byName {
		collides := wire.Collide(list)
		for _, s := range list {
			s.Collision = collides
		}
	}
	slices.SortFunc(out, func(a, b wire.ServiceInfo) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return strings.Compare(a.Provenance.Node, b.Provenance.Node)
	})
	return out
}

// serviceChanges are the registry events that turn old into new (a
// broker's services): up for what is new or changed, down for what went.
func serviceChanges(old, new []wire.ServiceInfo) []wire.ServiceEvent {
	key := func(s *wire.ServiceInfo) string { return s.Service + "\x00" + s.Provenance.Node }
	before := map[string]*wire.ServiceInfo{}
	for i := range old {
		before[key(&old[i])] = &old[i]
	}
	var evs []wire.ServiceEvent
	for i := range new {
		k := key(&new[i])
		if o, ok := before[k]; !ok || !sameService(o, &new[i]) {
			evs = append(evs, wire.ServiceEvent{Op: wire.ServiceUp, Service: new[i]})
		}
		delete(before, k)
	}
	for i := range old { // in their order, for a stable sequence
		if _, gone := before[key(&old[i])]; gone {
			evs = append(evs, wire.ServiceEvent{Op: wire.ServiceDown, Service: old[i]})
		}
	}
	return evs
}

// sameService reports whether a and b are one record. The collision flag
// is not compared: every broker decides it for the whole bus.
func sameService(a, b *wire.ServiceInfo) bool {
	x, y := *a, *b
	x.Collision, y.Collision = false, false
	ja, _ := wire.JSON(x)
	jb, _ := wire.JSON(y)
	return string(ja) == string(jb)
}

// notifyRemote tells this broker's registry watchers what changed on
// other brokers, and the collisions that begin or end with it.
func (r *registry) notifyRemote(evs []wire.ServiceEvent) {
	if len(evs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range evs {
		r.notifyRemoteLocked(&evs[i])
	}
}
