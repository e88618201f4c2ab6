package broker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"busbar/wire"
)

// directory maps node names to their current connection. A node that
// reconnects replaces its old connection, whose epoch is then stale.
type directory struct {
	mu     sync.RWMutex
	nodes  map[string]*conn
	iids   map[string]*conn  // instance id → its live connection
	epochs map[string]uint64 // last epoch handed out per node name
	// byPrincipal counts the nodes in nodes per principal that is capped
	// (conn.capped), for Options.MaxNodesPerPrincipal.
	byPrincipal     map[string]int
	maxPerPrincipal int // Options.MaxNodesPerPrincipal; ≤ 0: none
	// subscribed finds the connections with subscribers on a channel,
	// directly or by a wildcard pattern. A slice is replaced on change,
	// never modified, so a reader may range over what it got after
	// releasing the lock.
	subscribed *subIndex[*conn]
}

func (d *directory) init() {
	d.nodes = map[string]*conn{}
	d.iids = map[string]*conn{}
	d.byPrincipal = map[string]int{}
	d.epochs = map[string]uint64{}
	d.subscribed = newSubIndex[*conn]()
}

// subscribe and unsubscribe keep the per-channel index.
func (d *directory) subscribe(c *conn, channel string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.subscribed.add(channel, c)
}

func (d *directory) unsubscribe(c *conn, channel string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unsubscribeLocked(c, channel)
}

func (d *directory) unsubscribeLocked(c *conn, channel string) {
	d.subscribed.remove(channel, c)
}

// subscribers returns the connections with subscribers on channel, by
// name or by pattern, each once; the caller must not modify the slice.
func (d *directory) subscribers(channel string) []*conn {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.subscribed.match(channel)
}

// register makes c the node's connection and sets its epoch. queued
// runs under the lock, before c can be found, so whatever it queues on c
// precedes anything routed to it. A previous connection is closed with
// REPLACED; what was bound to it fails when its serving goroutine ends.
// An instance id may be reused only by the node that holds it (a
// reconnection); another node's live one is refused.
func (d *directory) register(c *conn, queued func(epoch uint64)) (replaced *conn, err error) {
	d.mu.Lock()
	if holder := d.iids[c.iid]; holder != nil && holder.node != c.node {
		d.mu.Unlock()
		return nil, fmt.Errorf("instance id %q is in use by another node", c.iid)
	}
	old := d.nodes[c.node]
	if c.capped && d.maxPerPrincipal > 0 && !(old != nil && old.capped && old.principal == c.principal) &&
		d.byPrincipal[c.principal] >= d.maxPerPrincipal {
		d.mu.Unlock()
		return nil, fmt.Errorf("principal %s has %d nodes logged in already, its limit (MaxNodesPerPrincipal); one must leave first",
			c.principal, d.maxPerPrincipal)
	}
	d.iids[c.iid] = c
	epoch := d.epochs[c.node] + 1
	d.epochs[c.node] = epoch
	c.epoch = epoch
	c.since = time.Now()
	queued(epoch)
	d.nodes[c.node] = c
	if old != nil {
		d.uncountLocked(old)
	}
	if c.capped {
		d.byPrincipal[c.principal]++
	}
	d.mu.Unlock()
	if old != nil {
		old.closeWith(wire.ResultReplaced, "replaced by a newer connection of the same node")
	}
	return old, nil
}

// remove drops c if it is still its node's connection, and its
// subscriptions from the index. c no longer routes, so its set is final.
func (d *directory) remove(c *conn) {
	c.mu.Lock()
	channels := keys(c.subs)
	c.mu.Unlock()
	d.mu.Lock()
	if d.nodes[c.node] == c {
		delete(d.nodes, c.node)
		d.uncountLocked(c)
	}
	if d.iids[c.iid] == c {
		delete(d.iids, c.iid)
	}
	for _, ch := range channels {
		d.unsubscribeLocked(c, ch)
	}
	d.mu.Unlock()
}

// uncountLocked stops counting c, which left nodes, for its principal.
func (d *directory) uncountLocked(c *conn) {
	if !c.capped {
		return
	}
	if d.byPrincipal[c.principal]--; d.byPrincipal[c.principal] <= 0 {
		delete(d.byPrincipal, c.principal)
	}
}

func (d *directory) lookup(node string) *conn {
	d.mu.RLock()
	c := d.nodes[node]
	d.mu.RUnlock()
	return c
}

func (d *directory) count() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.nodes)
}

// all returns the registered connections sorted by node name.
func (d *directory) all() []*conn {
	d.mu.RLock()
	out := make([]*conn, 0, len(d.nodes))
	for _, c := range d.nodes {
		out = append(out, c)
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b *conn) int { return strings.Compare(a.node, b.node) })
	return out
}

// Directory returns every registered node, sorted by name: this broker's
// and, on a bus (docs/cluster.md), every other broker's, each with its
// broker. A name held here is this broker's, whatever another broker
// still says: the claim that settles it is on its way.
func (b *Broker) Directory() []wire.NodeInfo {
	conns := b.dir.all()
	out := make([]wire.NodeInfo, 0, len(conns))
	for _, c := range conns {
		out = append(out, b.nodeInfo(c))
	}
	remote := b.bus.remoteNodes()
	if len(remote) == 0 {
		return out
	}
	for _, c := range conns {
		delete(remote, c.node)
	}
	for _, n := range remote {
		out = append(out, n.NodeInfo)
	}
	slices.SortFunc(out, func(a, b wire.NodeInfo) int { return strings.Compare(a.Node, b.Node) })
	return out
}

func (b *Broker) nodeInfo(c *conn) wire.NodeInfo {
	seen := time.Unix(0, c.lastRead.Load())
	c.mu.Lock()
	subs, handles := keys(c.subs), keys(c.handles)
	var queues map[string]string
	if len(c.queues) > 0 {
		queues = maps.Clone(c.queues)
	}
	c.mu.Unlock()
	return wire.NodeInfo{
		Node: c.node, Broker: b.opts.Name, Epoch: c.epoch, IID: c.iid, Remote: remote(c.nc),
		LastSeen: seen, LeaseExpires: seen.Add(b.opts.LeaseTimeout),
		Subscriptions: subs, Handlers: handles, Queues: queues, Advertised: c.advertised,
	}
}

func keys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
