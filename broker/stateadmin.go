package broker

// Administering namespaces: what a principal with state_admin on a
// namespace may do whoever owns it (docs/state.md#administration). A
// namespace is owned for good by the node that created it; these are the
// way out when that node is gone (a dead cli-<pid>) or renamed.

import (
	"encoding/json"
	"time"

	"busbar/auth"
	"busbar/state"
	"busbar/statestore"
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
	if s.command == wire.CmdStateDrop {
		if r := b.state.drop(t.NS, b.bus); r != nil {
			return r
		}
		b.log.Info("state namespace dropped", "ns", t.NS, "by", c.node)
		b.reply(c, *s, nil)
		return nil
	}
	if err := auth.ValidNodeName(t.Owner); err != nil {
		return rejectf("new owner: %v", err)
	}
	snap, r := b.state.transfer(t.NS, t.Owner, b.bus)
	if r != nil {
		return r
	}
	b.log.Info("state namespace given to another owner", "ns", t.NS, "owner", t.Owner, "by", c.node)
	return b.replyJSON(c, *s, snap, "the snapshot", "read it with bus.state.get")
}

// drop deletes namespace ns, on disk first. Its watchers are told to
// resync (bus.state.reset): they find it empty, with no owner. On a bus
// (joined) it leaves a tombstone, stored with the drop, and tells
// the other brokers, which drop their copies (state_meta.go).
func (s *stateService) drop(ns string, bus bus) *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.spaces[ns]
	if n == nil {
		return rejectf("no namespace %q", ns)
	}
	var rec *statestore.Tomb
	var floor uint64
	if bus.joined() {
		floor = max(uint64(time.Now().UnixNano()), s.meta[ns].Epoch)
		rec = &statestore.Tomb{NS: ns, Floor: floor}
	}
	if s.store != nil {
		if err := s.store.Drop(ns, rec); err != nil {
			return refuse(wire.ResultHandler, "the broker could not store the drop: "+err.Error())
		}
	}
	if bus.joined() {
		s.dropped[ns] = floor
	}
	s.removeLocked(ns, n)
	bus.replicateDrop(ns, floor) // under the lock, in order with the writes
	return nil
}

// transfer makes owner the owner of ns, on disk first; its entries and
// their versions stay. Watchers are told to resync, as the owner is part
// of the snapshot they hold.
//
// The new owner is stamped with the time (above the one it replaces), so
// that on a bus the latest change of owner wins on every broker whatever
// order they hear of it (state_meta.go); the namespace is marked as
// inherited, which lets the store hold the former owner's writes.
func (s *stateService) transfer(ns, owner string, bus bus) (state.Snapshot, *refusal) {
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
	meta := s.meta[ns]
	meta.OwnerAt, meta.Inherited = stampAbove(meta.OwnerAt), true
	snap := n.Snapshot()
	snap.Owner = owner
	if s.store != nil {
		if err := s.store.SetMeta(statestore.Record{NS: ns, Owner: owner, Seq: snap.Seq, Meta: meta}); err != nil {
			return state.Snapshot{}, refuse(wire.ResultHandler, "the broker could not store the new owner: "+err.Error())
		}
	}
	s.setOwnerLocked(ns, n, snap, meta)
	bus.replicateOwner(ns, owner, meta) // under the lock, in order with the writes
	return snap, nil
}

// setOwnerLocked replaces namespace n with snap (the same entries, a new
// owner) and meta, and tells its watchers.
func (s *stateService) setOwnerLocked(ns string, n *state.Namespace, snap state.Snapshot, meta nsMeta) {
	s.spaces[ns] = state.FromSnapshot(snap)
	s.meta[ns] = meta
	s.disownLocked(n.Owner())
	s.owned[snap.Owner]++
	s.resetWatchersLocked(ns)
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
