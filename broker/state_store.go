package broker

// The state service's store (Options.StatePath) is package statestore;
// this is the glue: open loads it into the service, persist and the
// writers in stateadmin.go, state_meta.go and cluster_state.go write
// through it, under stateService.mu.

import (
	"log/slog"

	"busbar/state"
	"busbar/statestore"
)

// ErrStoreUntrusted is matched (errors.Is) by the error of New when the
// state store (Options.StatePath) exists but cannot be trusted: empty,
// truncated, damaged, or holding what busbar never wrote. The broker does
// not start on it; docs/state.md#the-store says what to do. It is
// statestore.ErrUntrusted, so either matches.
var ErrStoreUntrusted = statestore.ErrUntrusted

// open loads the store at path ("" keeps state in memory); log hears of a
// fall-back to the previous transaction.
func (s *stateService) open(path string, log *slog.Logger) error {
	s.spaces, s.owned = map[string]*state.Namespace{}, map[string]int{}
	s.watchers, s.watching = map[string]map[*conn]struct{}{}, map[*conn]map[string]struct{}{}
	s.lost = map[*conn]map[string]struct{}{}
	s.meta, s.dropped = map[string]nsMeta{}, map[string]uint64{}
	if path == "" {
		return nil
	}
	st, l, err := statestore.Open(path, log)
	if err != nil {
		return err
	}
	for _, snap := range l.Spaces {
		s.spaces[snap.NS] = state.FromSnapshot(snap)
		s.owned[snap.Owner]++
	}
	s.meta, s.dropped = l.Metas, l.Tombs
	s.store = st
	return nil
}

func (s *stateService) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store == nil {
		return nil
	}
	err := s.store.Close()
	s.store = nil
	return err
}

// persist writes e and the namespace's record (seq, meta m), durably.
func (s *stateService) persist(n *state.Namespace, m nsMeta, e state.Entry, seq uint64) error {
	if s.store == nil {
		return nil
	}
	return s.store.Put(statestore.Record{NS: n.Name(), Owner: n.Owner(), Seq: seq, Meta: m}, e)
}
