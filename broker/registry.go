package broker

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"busbar/auth"
	"busbar/wire"
)

// MaxServicesPerNode bounds the services one connection may announce.
const MaxServicesPerNode = 64

// registry is the broker's service registry (docs/discovery.md): what each live
// connection announced. A record lives exactly as long as the connection
// that announced it (closed, replaced or expired, it goes), so the
// registry is always complete and a whois needs nobody to re-announce.
// Watchers get every change as a bus.service event, queued under the
// lock that made the change, so what a watcher reads is the snapshot its
// watch returned, then each change once, in order.
type registry struct {
	mu       sync.RWMutex           // read-locked on the routing path (instances)
	byName   map[string][]*instance // instances of a name, in announcement order
	byConn   map[*conn][]string     // names each connection announced
	watchers map[*conn]struct{}
	// lost are watchers that missed an event (their queue was full): they
	// no longer watch, and are owed a "lost" event, which the sweeper
	// retries until it fits, so the client ends its watches and can watch
	// again from a fresh snapshot.
	lost map[*conn]struct{}
	seq  uint64 // ids of bus.service events
	// On a bus (cluster_collide.go): remote returns the other brokers'
	// instances of a name, and told the instances, local or remote, whose
	// collision watchers were told of and not yet told is over.
	remote func(name string) []wire.ServiceInfo
	told   map[string]bool
}

// instance is one connection's record of a service. Records are matched
// by connection, not by instance id: a node that reconnects with the same
// id must not take over, or lose, what its old connection announced.
type instance struct {
	c    *conn
	info wire.ServiceInfo
}

func (r *registry) init() {
	r.byName = map[string][]*instance{}
	r.byConn = map[*conn][]string{}
	r.watchers = map[*conn]struct{}{}
	r.lost = map[*conn]struct{}{}
	r.told = map[string]bool{}
}

// announce records (or updates) c's instance of a.Service.
func (b *Broker) announce(c *conn, a wire.Announcement) (wire.ServiceInfo, *refusal) {
	if err := a.Check(); err != nil {
		return wire.ServiceInfo{}, rejectf("%v", err)
	}
	if len(a.Channels) > b.opts.MaxRegistrations {
		return wire.ServiceInfo{}, rejectf("%d channels, over the limit of %d", len(a.Channels), b.opts.MaxRegistrations)
	}
	for _, ch := range a.Channels {
		if err := auth.ValidChannel(ch); err != nil {
			return wire.ServiceInfo{}, rejectf("%v", err)
		}
		if r := permit(c, auth.ActionHandle, ch); r != nil {
			return wire.ServiceInfo{}, r
		}
	}
	a.Channels = slices.Compact(slices.Sorted(slices.Values(a.Channels)))
	in := &instance{c: c, info: wire.ServiceInfo{
		Announcement: a,
		Address:      a.Service + "." + c.addr,
		IID:          c.iid,
		Provenance: wire.RegisterProvenance{
			Node: c.node, Broker: b.opts.Name, Epoch: c.epoch, Remote: remote(c.nc), Principal: c.principal, At: time.Now().UTC(),
		},
	}}
	r := &b.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.out.Closing() {
		return wire.ServiceInfo{}, rejectf("connection is closing")
	}
	// A node's replaced connection may not have left yet: its record is
	// stale, not a collision.
	for _, o := range r.byName[a.Service] {
		if o.c != c && o.c.node == c.node {
			r.byConn[o.c] = slices.DeleteFunc(r.byConn[o.c], func(n string) bool { return n == a.Service })
			r.dropLocked(o.c, a.Service)
		}
	}
	list := r.byName[a.Service]
	if i := slices.IndexFunc(list, func(o *instance) bool { return o.c == c }); i >= 0 {
		list = slices.Clone(list) // routing reads the old one unlocked (instances)
		list[i] = in              // a re-announcement replaces the record
		r.byName[a.Service] = list
		// It may have joined or left a group: the collision may begin or end.
		in.info.Collision = wire.Collide(r.allLocked(a.Service))
		r.notifyLocked(wire.ServiceUp, &in.info)
		if r.remote != nil {
			r.reconcileLocked(a.Service, &in.info)
		} else {
			for _, o := range list {
				r.flagLocked(&o.info, in.info.Collision)
			}
		}
		return in.info, nil
	}
	if len(r.byConn[c]) >= MaxServicesPerNode {
		return wire.ServiceInfo{}, rejectf("%d services announced, the limit per connection", MaxServicesPerNode)
	}
	r.byConn[c] = append(r.byConn[c], a.Service)
	list = append(list, in)
	r.byName[a.Service] = list
	if r.remote != nil { // the collisions of the whole bus
		in.info.Collision = wire.Collide(r.allLocked(a.Service))
		r.notifyLocked(wire.ServiceUp, &in.info)
		r.reconcileLocked(a.Service, &in.info)
		return in.info, nil
	}
	collides := wire.Collide(r.allLocked(a.Service))
	if collides {
		in.info.Collision = true
		b.log.Warn("service name collision", "service", a.Service, "instances", len(list))
	}
	r.notifyLocked(wire.ServiceUp, &in.info)
	for _, other := range list[:len(list)-1] {
		r.flagLocked(&other.info, collides)
	}
	if collides {
		r.notifyLocked(wire.ServiceCollision, &in.info)
	}
	return in.info, nil
}

// allLocked is every live instance of name the registry knows: this
// broker's, and on a bus the other brokers'.
func (r *registry) allLocked(name string) []*wire.ServiceInfo {
	var all []*wire.ServiceInfo
	for _, in := range r.byName[name] {
		all = append(all, &in.info)
	}
	if r.remote != nil {
		remote := r.remoteOf(name)
		for i := range remote {
			all = append(all, &remote[i])
		}
	}
	return all
}

// flagLocked sets s's collision flag, telling the watchers when it
// changes (one broker: on a bus, settleLocked).
func (r *registry) flagLocked(s *wire.ServiceInfo, collides bool) {
	switch {
	case collides && !s.Collision:
		s.Collision = true
		r.notifyLocked(wire.ServiceCollision, s)
	case !collides && s.Collision:
		s.Collision = false
		r.notifyLocked(wire.ServiceUp, s)
	}
}

// withdraw removes c's instance of name; it reports whether there was one.
func (b *Broker) withdraw(c *conn, name string) bool {
	r := &b.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	names := r.byConn[c]
	i := slices.Index(names, name)
	if i < 0 {
		return false
	}
	r.byConn[c] = slices.Delete(names, i, i+1)
	r.dropLocked(c, name)
	return true
}

// leave removes everything c announced and its watch: c has left.
func (b *Broker) leave(c *conn) {
	r := &b.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watchers, c)
	delete(r.lost, c)
	for _, name := range r.byConn[c] {
		r.dropLocked(c, name)
	}
	delete(r.byConn, c)
}

func (r *registry) dropLocked(c *conn, name string) {
	list := r.byName[name]
	i := slices.IndexFunc(list, func(o *instance) bool { return o.c == c })
	if i < 0 {
		return
	}
	gone := &list[i].info
	list = slices.Delete(slices.Clone(list), i, i+1)
	if len(list) == 0 {
		delete(r.byName, name)
	} else {
		r.byName[name] = list
	}
	r.notifyLocked(wire.ServiceDown, gone)
	if r.remote != nil {
		r.reconcileLocked(name, nil)
		return
	}
	collides := wire.Collide(r.allLocked(name)) // over when one is left, or the rest are one group
	for _, in := range list {
		r.flagLocked(&in.info, collides)
	}
}

// notifyLocked queues a bus.service event for every watcher. A watcher
// whose queue is full misses it and is told so by the broker log; its
// next whois or watch gives the truth.
func (r *registry) notifyLocked(op wire.ServiceOp, s *wire.ServiceInfo) {
	r.noteLocked(op, s)
	if len(r.watchers) == 0 {
		return
	}
	body, _ := wire.JSON(wire.ServiceEvent{Op: op, Service: *s})
	r.seq++
	m := wire.New(wire.TypeEvent, wire.CmdService).WithHeader(wire.HeaderID, "svc-"+strconv.FormatUint(r.seq, 10)).WithBody(body)
	for w := range r.watchers {
		if !w.enqueue(m, time.Time{}) {
			w.b.log.Warn("registry event dropped: watcher's queue is full; its watch ends", "node", w.node, "service", s.Service, "op", op)
			delete(r.watchers, w)
			r.lost[w] = struct{}{}
		}
	}
}

// services returns the instances of name (all when name is ""), sorted by
// name, then node.
func (r *registry) services(name string) []wire.ServiceInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.servicesLocked(name)
}

func (r *registry) servicesLocked(name string) []wire.ServiceInfo {
	out := []wire.ServiceInfo{}
	for n, list := range r.byName {
		if name != "" && n != name {
			continue
		}
		for _, in := range list {
			out = append(out, in.info)
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

// watch starts c's bus.service events; snapshot runs under the registry's
// lock with the current records, so it can queue them before any event.
// When it reports false, c does not watch.
func (r *registry) watch(c *conn, snapshot func([]wire.ServiceInfo) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if snapshot(r.servicesLocked("")) {
		r.watchers[c] = struct{}{}
	}
}

func (r *registry) unwatch(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watchers, c)
}

// retryLost sends the owed "lost" events that fit now (the sweeper's).
func (r *registry) retryLost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lost) == 0 {
		return
	}
	body, _ := wire.JSON(wire.ServiceEvent{Op: wire.ServiceLost})
	for w := range r.lost {
		r.seq++
		m := wire.New(wire.TypeEvent, wire.CmdService).WithHeader(wire.HeaderID, "svc-"+strconv.FormatUint(r.seq, 10)).WithBody(body)
		if w.enqueue(m, time.Time{}) || w.out.Closing() {
			delete(r.lost, w)
		}
	}
}

// instances returns the live instances of name on this broker; the
// caller must not modify them. The registry never changes a slice it
// handed out: it makes a new one.
func (r *registry) instances(name string) []*instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	list := r.byName[name]
	for i, in := range list {
		if in.c.out.Closing() { // leaving: it cannot answer any more
			live := slices.Clone(list[:i])
			for _, in := range list[i+1:] {
				if !in.c.out.Closing() {
					live = append(live, in)
				}
			}
			return live
		}
	}
	return list
}
