package broker

// The state service's store (Options.StatePath): one bbolt file that
// holds every namespace.

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"busbar/state"
	"busbar/wire"
)

var (
	bucketMeta    = []byte("namespaces") // name → nsMeta
	bucketEntries = []byte("entries")    // one nested bucket per namespace: key → state.Entry
)

type nsMeta struct {
	Owner string `json:"owner"`
	Seq   uint64 `json:"seq"`
}

// open loads the store at path ("" keeps state in memory).
func (s *stateService) open(path string) error {
	s.spaces, s.owned = map[string]*state.Namespace{}, map[string]int{}
	s.watchers, s.watching = map[string]map[*conn]struct{}{}, map[*conn]map[string]struct{}{}
	s.lost = map[*conn]map[string]struct{}{}
	if path == "" {
		return nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("broker: state store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		entries, err := tx.CreateBucketIfNotExists(bucketEntries)
		if err != nil {
			return err
		}
		return meta.ForEach(func(name, raw []byte) error {
			var m nsMeta
			if err := json.Unmarshal(raw, &m); err != nil {
				return fmt.Errorf("namespace %q: %w", name, err)
			}
			snap := state.Snapshot{NS: string(name), Owner: m.Owner, Seq: m.Seq}
			if b := entries.Bucket(name); b != nil {
				if err := b.ForEach(func(_, raw []byte) error {
					var e state.Entry
					if err := json.Unmarshal(raw, &e); err != nil {
						return fmt.Errorf("namespace %q: %w", name, err)
					}
					snap.Entries = append(snap.Entries, e)
					return nil
				}); err != nil {
					return err
				}
			}
			s.spaces[snap.NS] = state.FromSnapshot(snap)
			s.owned[m.Owner]++
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("broker: loading state from %s: %w", path, err)
	}
	s.db = db
	return nil
}

func (s *stateService) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// persist writes e and the namespace's meta with seq, durably.
func (s *stateService) persist(n *state.Namespace, e state.Entry, seq uint64) error {
	if s.db == nil {
		return nil
	}
	meta, _ := json.Marshal(nsMeta{Owner: n.Owner(), Seq: seq})
	raw, _ := wire.JSON(e)
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put([]byte(n.Name()), meta); err != nil {
			return err
		}
		b, err := tx.Bucket(bucketEntries).CreateBucketIfNotExists([]byte(n.Name()))
		if err != nil {
			return err
		}
		return b.Put([]byte(e.Key), raw)
	})
}
