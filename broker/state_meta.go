package broker

// What a bus of brokers needs to agree on a namespace beyond its entries
// (docs/cluster.md#dropping-a-namespace-and-giving-it-a-new-owner): which
// incarnation of it a broker holds, who owns it and since when, and which
// namespaces were dropped. Entries merge by the conflict rule; these merge
// by their own rules, so that every broker ends with the same answer
// whatever order it hears things in:
//
//   - an incarnation (Epoch) is a time stamp taken when a broker creates
//     the namespace, above every tombstone that broker knows of it; two
//     brokers that created it concurrently merge their entries and keep
//     the greater epoch;
//   - the owner with the greater (OwnerAt, owner) wins; a new owner's
//     OwnerAt is a time stamp above the one it replaces;
//   - a drop leaves a tombstone, a floor: every incarnation with an epoch
//     at or under it is dropped wherever it is found, and a copy of it a
//     broker publishes is ignored. The floor is the later of the dropping
//     broker's clock and the dropped epoch, so a namespace created again
//     after the drop (by the brokers' clocks, or by a broker that knows the
//     tombstone) survives it.
//
// Tombstones are kept ClusterOptions.TombstoneRetention from the drop
// (the floor is its time), stored, and sent with every digest, so a
// broker that was cut off or stopped during a drop drops its copy when it
// hears from the others again; one that comes back after the retention
// brings the namespace back. Counting from the drop, not from when each
// broker learnt of it, lets every broker forget a tombstone at about the
// same time: one that learnt late does not teach it again to those that
// forgot it.

import (
	"math"
	"time"

	"busbar/state"
	"busbar/statestore"
)

// nsMeta is a namespace's incarnation and ownership record (Epoch,
// OwnerAt, Inherited), stored in its record in the store.
type nsMeta = statestore.Meta

// dropTime is when a drop with floor was decided, by the dropping
// broker's clock.
func dropTime(floor uint64) time.Time {
	return time.Unix(0, int64(min(floor, math.MaxInt64)))
}

// stampAbove is a time stamp later than after: the clock, or after+1 when
// the clock is not past it.
func stampAbove(after uint64) uint64 {
	return max(uint64(time.Now().UnixNano()), after+1)
}

// ownerWins reports whether owner set at at beats cur set at curAt.
func ownerWins(at uint64, owner string, curAt uint64, cur string) bool {
	return at > curAt || at == curAt && owner > cur
}

// newMetaLocked is the record of a namespace this broker creates now.
func (s *stateService) newMetaLocked(ns string) nsMeta {
	e := stampAbove(s.dropped[ns]) // 0 when there is no tombstone
	return nsMeta{Epoch: e, OwnerAt: e}
}

// buriedLocked reports whether an incarnation of ns with epoch is dropped.
func (s *stateService) buriedLocked(ns string, epoch uint64) bool {
	floor, ok := s.dropped[ns]
	return ok && epoch <= floor
}

// buryLocked records a tombstone of ns at floor, if it raises the one
// this broker has, and drops this broker's incarnation if the floor covers
// it: its watchers are told to resync. It reports whether it dropped one.
// On a bus, a tombstone past the retention is ignored, as it would be
// forgotten.
func (s *stateService) buryLocked(ns string, floor uint64, b *Broker) bool {
	if cur, ok := s.dropped[ns]; ok && cur >= floor {
		return false // known already
	}
	if b.bus.joined() && time.Since(dropTime(floor)) >= b.bus.tombstoneRetention() {
		return false
	}
	rec := &statestore.Tomb{NS: ns, Floor: floor}
	n := s.spaces[ns]
	covers := n != nil && s.meta[ns].Epoch <= floor
	if s.store != nil {
		var err error
		if covers {
			err = s.store.Drop(ns, rec)
		} else {
			err = s.store.PutTomb(*rec)
		}
		if err != nil {
			b.log.Error("state store write failed (a drop from another broker); the next digest brings it again", "ns", ns, "err", err)
			return false
		}
	}
	s.dropped[ns] = floor
	if covers {
		s.removeLocked(ns, n)
	}
	return covers
}

// removeLocked forgets namespace n (dropped) and tells its watchers.
func (s *stateService) removeLocked(ns string, n *state.Namespace) {
	delete(s.spaces, ns)
	delete(s.meta, ns)
	s.disownLocked(n.Owner())
	s.resetWatchersLocked(ns)
}

// forgetTombstones forgets the tombstones of drops retention or longer
// before now, on disk first. It reports how many it forgot.
func (s *stateService) forgetTombstones(now time.Time, retention time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var old []string
	for ns, floor := range s.dropped {
		if now.Sub(dropTime(floor)) >= retention {
			old = append(old, ns)
		}
	}
	if len(old) == 0 {
		return 0, nil
	}
	if s.store != nil {
		if err := s.store.ForgetTombs(old); err != nil {
			return 0, err
		}
	}
	for _, ns := range old {
		delete(s.dropped, ns)
	}
	return len(old), nil
}
