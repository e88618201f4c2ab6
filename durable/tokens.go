package durable

import (
	"encoding/binary"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// TokenRetention is how long past its expiry an invitation's record stays
// in device.db: as long as the relay keeps a blob (relay.MaxTTL, 30
// days). Any Pair that arrives after the expiry is refused, so the record
// only names the refusal (tokenExpired rather than unknownToken) and, for
// a used token, recognises a copy of the accepted Pair, acked with no
// event. A copy pushed before the expiry waits on the relay at most this
// long. Then the record, and the secret in it, is deleted.
const TokenRetention = 30 * 24 * time.Hour

// sweepBatch bounds the records a sweep deletes in one transaction
// (expired dedup records, token records past their retention).
const sweepBatch = 256

// The tokenexp bucket indexes the tokens bucket by when each record goes:
//
//	tokenexp  delete-at, Unix s (8) | token id (16)  → empty
//
// so that a sweep reads only the records due.
var bTokenExp = []byte("tokenexp")

func tokenExpKey(expires time.Time, id seal.TokenID) []byte {
	at := expires.Add(TokenRetention).Unix()
	return append(binary.BigEndian.AppendUint64(nil, uint64(at)), id[:]...)
}

// putToken records an invitation and indexes it, in tx.
func putToken(tx *bolt.Tx, rec *tokenRecord) error {
	id := rec.tok.ID()
	if err := tx.Bucket(bTokens).Put(id[:], rec.encode()); err != nil {
		return err
	}
	return tx.Bucket(bTokenExp).Put(tokenExpKey(rec.tok.Expires(), id), nil)
}

// sweepTokens deletes up to sweepBatch token records whose expiry is
// TokenRetention or more before now, used or not.
func sweepTokens(tx *bolt.Tx, now time.Time) error {
	return sweep(tx.Bucket(bTokenExp), tx.Bucket(bTokens), func(at []byte) bool {
		return !now.Before(time.Unix(int64(binary.BigEndian.Uint64(at)), 0))
	})
}

// indexTokens builds the tokenexp bucket for a device.db written before
// it existed, from the expiry in each token record.
func indexTokens(tx *bolt.Tx) error {
	if tx.Bucket(bTokenExp) != nil {
		return nil
	}
	idx, err := tx.CreateBucket(bTokenExp)
	if err != nil {
		return err
	}
	return tx.Bucket(bTokens).ForEach(func(k, v []byte) error {
		rec, err := decodeToken(v)
		if err != nil {
			return err
		}
		return idx.Put(tokenExpKey(rec.tok.Expires(), rec.tok.ID()), nil)
	})
}
