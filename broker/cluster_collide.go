package broker

// Collisions across brokers (docs/discovery.md#collisions): on a bus, a
// service name announced on two brokers is a collision as it is on one.
// Each broker's registry keeps which instances, its own or other
// brokers', its watchers were told collide (told), and after every change
// to a name, made here or learnt from another broker's share, compares
// that with the live instances of the whole bus: an instance that
// collides and was not told gets a collision event, one told whose
// collision is over gets an up event with the flag cleared, the instance
// that changed last, as on one broker.

import (
	"slices"

	"busbar/wire"
)

// remoteInstances are the other brokers' live instances of name.
func (cl *cluster) remoteInstances(name string) []wire.ServiceInfo {
	all := cl.remoteServices()
	return slices.DeleteFunc(all, func(s wire.ServiceInfo) bool { return s.Service != name })
}

// remoteOf is r.remote(name) but the instances of nodes that announced
// name here: a node held here is this broker's, whatever another says.
func (r *registry) remoteOf(name string) []wire.ServiceInfo {
	return slices.DeleteFunc(r.remote(name), func(s wire.ServiceInfo) bool {
		return slices.ContainsFunc(r.byName[name], func(in *instance) bool { return in.c.node == s.Provenance.Node })
	})
}

func instanceKey(s *wire.ServiceInfo) string {
	return s.Service + "\x00" + s.Provenance.Node + "\x00" + s.Provenance.Broker
}

// noteLocked keeps told as the events say it, watched or not.
func (r *registry) noteLocked(op wire.ServiceOp, s *wire.ServiceInfo) {
	if r.remote == nil {
		return
	}
	switch k := instanceKey(s); {
	case op == wire.ServiceCollision:
		r.told[k] = true
	case op == wire.ServiceDown, op == wire.ServiceUp && !s.Collision:
		delete(r.told, k)
	}
}

// notifyRemoteLocked tells the watchers of another broker's change, its
// up flagged as a collision when the name has another live instance on
// the bus, and then of the collisions it begins or ends.
func (r *registry) notifyRemoteLocked(ev *wire.ServiceEvent) {
	s := &ev.Service
	if ev.Op != wire.ServiceUp {
		s.Collision = r.told[instanceKey(s)] // as the watchers last heard of it
		r.notifyLocked(ev.Op, s)
		r.reconcileLocked(s.Service, nil)
		return
	}
	s.Collision = wire.Collide(r.allLocked(s.Service))
	r.notifyLocked(wire.ServiceUp, s)
	r.reconcileLocked(s.Service, s)
}

// reconcileLocked sends the collision and up events that bring what
// watchers were told of name's collisions to what is live on the bus;
// last, the instance that changed, goes last.
func (r *registry) reconcileLocked(name string, last *wire.ServiceInfo) {
	all := r.allLocked(name)
	want := wire.Collide(all)
	var trailing *wire.ServiceInfo
	for _, s := range all {
		if last != nil && instanceKey(s) == instanceKey(last) {
			trailing = s
			continue
		}
		r.settleLocked(s, want)
	}
	if trailing != nil {
		r.settleLocked(trailing, want)
	}
}

// settleLocked flags s as colliding or not, telling the watchers when
// that changes what they were told.
func (r *registry) settleLocked(s *wire.ServiceInfo, collides bool) {
	told := r.told[instanceKey(s)]
	s.Collision = collides
	switch {
	case collides && !told:
		r.notifyLocked(wire.ServiceCollision, s)
	case !collides && told:
		r.notifyLocked(wire.ServiceUp, s)
	}
}
