package statestore

// Tombstones of dropped namespaces, kept on a bus (the broker's
// state_meta.go says why and for how long): one record per namespace in
// bucketDropped, written with the drop or when another broker's drop is
// learnt, and read and verified at Open with everything else.

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"busbar/state"
)

// Tomb is a tombstone: every incarnation of namespace NS with an epoch
// at or under Floor is dropped.
type Tomb struct {
	NS    string `json:"ns"`
	Floor uint64 `json:"floor"`
}

// PutTomb records a tombstone, durably (a drop learnt from another broker
// that leaves nothing here to drop).
func (st *Store) PutTomb(t Tomb) error {
	return st.db.Update(func(tx *bolt.Tx) error { return putTomb(tx, t) })
}

// ForgetTombs deletes the tombstones of namespaces ns, durably, in one
// transaction.
func (st *Store) ForgetTombs(ns []string) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDropped)
		for _, name := range ns {
			if err := b.Delete([]byte(name)); err != nil {
				return err
			}
		}
		return nil
	})
}

// putTomb writes a tombstone's record, creating the bucket in a store
// that never had one.
func putTomb(tx *bolt.Tx, t Tomb) error {
	b, err := tx.CreateBucketIfNotExists(bucketDropped)
	if err != nil {
		return err
	}
	return b.Put([]byte(t.NS), encodeRecord(t))
}

// loadTombs reads and verifies the tombstones (b nil: none).
func loadTombs(b *bolt.Bucket, into map[string]uint64) error {
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var t Tomb
		if v == nil {
			return fmt.Errorf("tombstone %q: a bucket where its record belongs", k)
		}
		if _, err := decodeRecord(v, &t); err != nil {
			return fmt.Errorf("tombstone %q: %w", k, err)
		}
		if t.NS != string(k) {
			return fmt.Errorf("tombstone %q: its record names namespace %q", k, t.NS)
		}
		if err := state.CheckName(t.NS); err != nil {
			return fmt.Errorf("tombstone %q: %w", k, err)
		}
		into[t.NS] = t.Floor
	}
	return nil
}
