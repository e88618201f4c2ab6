package broker

// Administering namespaces: what a principal with state_admin on a
// namespace may do whoever owns it (docs/state.md#administration). A
// namespace is owned for good by the node that created it; these are the
// way out when that node is gone (a dead cli-<pid>) or renamed.

import (
	"encoding/json"

	"busbar/auth"
	"busbar/state"
	"busbar/wire"
)

// stateAdmin answers bus.state.drop and bus.state.owner.
func (b *Broker) stateAdmin(c *conn, m *wire.Message, s *subject) *refusal {
	var t state.Transfer // a drop's state.Query has the same ns field
	if err := json.Unmarshal(m.Body(), &t); err != nil {
		return rejectf("state %s: %v", s.command, err)
	}
	s.topic = t.NS
	if r := permitState(c, auth.ActionStateAdmin, t.NS); r != nil {
		return r
	}
	if b.cl != nil {
		// Every broker of a bus holds every namespace and merges the
		// others' entries: a drop or a new owner decided here alone would
		// be undone by the next merge.
		return rejectf("namespace %q: dropping a namespace or changing its owner is not supported on a bus of brokers yet", t.NS)
	}
	if s.command == wire.CmdStateDrop {
		if r := b.state.drop(t.NS); r != nil {
			return r
		}
		b.log.Info("state namespace dropped", "ns", t.NS, "by", c.node)
		b.reply(c, *s, nil)
		return nil
	}
	if err := auth.ValidNodeName(t.Owner); err != nil {
		return rejectf("new owner: %v", err)
	}
	snap, r := b.state.transfer(t.NS, t.Owner)
	if r != nil {
		return r
	}
	b.log.Info("state namespace given to another owner", "ns", t.NS, "owner", t.Owner, "by", c.node)
	return b.replyJSON(c, *s, snap, "the snapshot", "read it with bus.state.get")
}

// drop deletes namespace ns, on disk first. Its watchers are told to
// resync (bus.state.reset): they find it empty, with no owner.
func (s *stateService) drop(ns string) *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.spaces[ns]
	if n == nil {
		return rejectf("no namespace %q", ns)
	}
	if s.store != nil {
		if err := s.store.drop(ns); err != nil {
			return refuse(wire.ResultHandler, "the broker could not store the drop: "+err.Error())
		}
	}
	delete(s.spaces, ns)
	s.disownLocked(n.Owner())
	s.resetWatchersLocked(ns)
	return nil
}

// transfer makes owner the owner of ns, on disk first; its entries and
// their versions stay. Watchers are told to resync, as the owner is part
// of the snapshot they hold.
func (s *stateService) transfer(ns, owner string) (state.Snapshot, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.spaces[ns]
	switch {
	case n == nil:
		return state.Snapshot{}, rejectf("no namespace %q", ns)
	case n.Owner() == owner:
		return n.Snapshot(), nil
	case s.owned[owner] >= MaxNamespacesPerNode:
		return state.Snapshot{}, rejectf("%s owns %d namespaces, the limit", owner, MaxNamespacesPerNode)
	}
	snap := n.Snapshot()
	old := snap.Owner
	snap.Owner = owner
	if s.store != nil {
		if err := s.store.setOwner(ns, owner, snap.Seq); err != nil {
			return state.Snapshot{}, refuse(wire.ResultHandler, "the broker could not store the new owner: "+err.Error())
		}
	}
	s.spaces[ns] = state.FromSnapshot(snap)
	s.disownLocked(old)
	s.owned[owner]++
	s.resetWatchersLocked(ns)
	return snap, nil
}

func (s *stateService) disownLocked(owner string) {
	if s.owned[owner]--; s.owned[owner] <= 0 {
		delete(s.owned, owner)
	}
}

// resetWatchersLocked tells every watcher of ns to resync, through the
// same path as a watcher that missed a delta.
func (s *stateService) resetWatchersLocked(ns string) {
	for w := range s.watchers[ns] {
		s.unwatchLocked(w, ns)
		if s.lost[w] == nil {
			s.lost[w] = map[string]struct{}{}
		}
		s.lost[w][ns] = struct{}{}
	}
}
