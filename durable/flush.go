package durable

import (
	"bytes"
	"context"
	"errors"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// backoff is the delay before the next push of an entry whose push has
// failed attempts times: 1 s, 2 s, 4 s, … up to 5 min.
func backoff(attempts uint32) time.Duration {
	if attempts == 0 {
		return 0
	}
	d := MinBackoff
	for i := uint32(1); i < attempts && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// FlushResult says what a Flush did and when the next push is due.
type FlushResult struct {
	Pushed  int       // entries delivered (deleted)
	Failed  int       // entries removed with sendFailed (refused permanently, or expired)
	Retry   int       // entries whose push failed and wait for their backoff
	Pending int       // entries still in the outbox
	NextDue time.Time // the earliest time a queued head entry is due; zero if none waits
}

// Flush pushes every entry that is due, for each recipient in the order
// they were sent, and returns once each recipient's queue is empty or
// waits for a backoff. Head of line: an entry is pushed only once the one
// before it for that recipient is delivered or failed, so a later entry
// never goes out while an earlier one waits to be retried.
//
// A push acknowledged by the relay deletes the entry (Delivered). A
// permanent refusal deletes it with sendFailed(tooLarge|malformed)
// (Failed). Any other error (a temporary refusal, a lost connection)
// leaves it queued with the next backoff (1 s doubling to 5 min). First,
// every Sync entry 30 days old (SyncTTL) or older is removed with
// sendFailed(expired); control entries never expire.
//
// Several processes may Flush one device; an entry pushed by two of them
// reaches the recipient twice and its dedup drops the copy.
func (d *Device) Flush(ctx context.Context, r Relay) (FlushResult, error) {
	var res FlushResult
	if d.isClosed() {
		return res, ErrClosed
	}
	var heads []seal.DeviceID
	err := d.update(func(tx *bolt.Tx) error {
		var err error
		heads, err = d.expire(tx, &res)
		return err
	})
	if err != nil {
		return res, err
	}
	for _, to := range heads {
		if err := d.flushTo(ctx, r, to, &res); err != nil {
			return res, err
		}
	}
	err = d.view(func(tx *bolt.Tx) error {
		res.Pending = countKeys(tx.Bucket(bOutbox))
		return nil
	})
	return res, err
}

// expire removes expired Sync entries and returns the recipients that
// have entries left.
func (d *Device) expire(tx *bolt.Tx, res *FlushResult) ([]seal.DeviceID, error) {
	now := d.now()
	var heads []seal.DeviceID
	c := tx.Bucket(bOutbox).Cursor()
	for k, v := c.First(); k != nil; {
		e, err := decodeEntry(v)
		if err != nil {
			return nil, err
		}
		m, err := getMessage(tx, e.msg)
		if err != nil {
			return nil, err
		}
		if m.inner.Kind == seal.KindSync && !now.Before(m.inner.Timestamp.Add(SyncTTL)) {
			k = bytes.Clone(k)
			if err := d.drop(tx, k, e, m.inner, ReasonExpired); err != nil {
				return nil, err
			}
			res.Failed++
			k, v = c.Seek(k) // the first key after the deleted one
			continue
		}
		to := e.to.ID()
		if len(heads) == 0 || heads[len(heads)-1] != to {
			heads = append(heads, to)
		}
		k, v = c.Next()
	}
	return heads, nil
}

// FlushWindow is how many of one recipient's entries Flush pushes at once
// to a PipelinedRelay, without waiting for each answer: enough to share
// the relay's group commits, few enough that a refusal near the head
// wastes little (the entries behind it are refused too and pushed again).
const FlushWindow = 64

// queued is one outbox entry read for a push.
type queued struct {
	key []byte
	e   entry
	msg seal.Inner
}

// flushTo pushes to's entries, in order, until one fails or none is due.
func (d *Device) flushTo(ctx context.Context, r Relay, to seal.DeviceID, res *FlushResult) error {
	if pr, ok := r.(PipelinedRelay); ok {
		return d.flushPipelined(ctx, pr, to, res)
	}
	for {
		var (
			key []byte
			e   entry
			msg seal.Inner
		)
		err := d.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(bOutbox).Cursor()
			k, v := c.Seek(to[:])
			if k == nil || !bytes.HasPrefix(k, to[:]) {
				return nil
			}
			var err error
			if e, err = decodeEntry(v); err != nil {
				return err
			}
			m, err := getMessage(tx, e.msg)
			key, msg = bytes.Clone(k), m.inner
			return err
		})
		if err != nil || key == nil {
			return err
		}
		if d.now().Before(e.due) {
			if res.NextDue.IsZero() || e.due.Before(res.NextDue) {
				res.NextDue = e.due
			}
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		blob, err := seal.Seal(d.me, e.to, msg)
		if err != nil {
			// Cannot happen for what Send wrote; a record that no longer
			// seals is dropped rather than blocking the queue forever.
			return d.update(func(tx *bolt.Tx) error { return d.drop(tx, key, e, msg, ReasonMalformed) })
		}
		_, perr := r.Push(ctx, blob)
		if perr == nil {
			if err := d.fail(FailSenderAfterPush); err != nil {
				return err
			}
		}
		switch {
		case perr == nil:
			res.Pushed++
			err = d.update(func(tx *bolt.Tx) error {
				if err := d.remove(tx, key, e); err != nil {
					return err
				}
				return resetBehind(tx, to)
			})
		case Permanent(perr):
			res.Failed++
			err = d.update(func(tx *bolt.Tx) error { return d.drop(tx, key, e, msg, failReason(perr)) })
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			res.Retry++
			e.attempts++
			e.due = d.now().Add(backoff(e.attempts))
			if res.NextDue.IsZero() || e.due.Before(res.NextDue) {
				res.NextDue = e.due
			}
			return d.update(func(tx *bolt.Tx) error { return putIfPresent(tx, key, e) })
		}
		if err != nil {
			return err
		}
	}
}

// flushPipelined is flushTo over a PipelinedRelay: up to FlushWindow of
// to's due entries, from the head, go out in one pipeline, and their
// outcomes are applied in order in one transaction. Behind the first entry
// that fails temporarily nothing is applied: the relay refused the pushes
// behind it (so none overtakes it), and they stay queued, due as they
// were, behind its backoff.
func (d *Device) flushPipelined(ctx context.Context, r PipelinedRelay, to seal.DeviceID, res *FlushResult) error {
	for {
		batch, err := d.dueFrom(to, res)
		if err != nil || len(batch) == 0 {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		blobs := make([][]byte, 0, len(batch))
		for _, q := range batch {
			blob, err := seal.Seal(d.me, q.e.to, q.msg)
			if err != nil {
				break // pushed up to here; it is dropped when it reaches the head
			}
			blobs = append(blobs, blob)
		}
		if len(blobs) == 0 {
			// Cannot happen for what Send wrote; a record that no longer
			// seals is dropped rather than blocking the queue forever.
			q := batch[0]
			if err := d.update(func(tx *bolt.Tx) error { return d.drop(tx, q.key, q.e, q.msg, ReasonMalformed) }); err != nil {
				return err
			}
			continue
		}
		batch = batch[:len(blobs)]
		results := r.PushAll(ctx, blobs)
		for _, p := range results {
			if p.Err == nil {
				if err := d.fail(FailSenderAfterPush); err != nil {
					return err
				}
				break
			}
		}
		stopped := false
		err = d.update(func(tx *bolt.Tx) error {
			pushed := false
			for i, q := range batch {
				perr := results[i].Err
				switch {
				case perr == nil:
					res.Pushed++
					pushed = true
					if err := d.remove(tx, q.key, q.e); err != nil {
						return err
					}
					if err := resetBehind(tx, to); err != nil {
						return err
					}
				case Permanent(perr):
					res.Failed++
					if err := d.drop(tx, q.key, q.e, q.msg, failReason(perr)); err != nil {
						return err
					}
				default:
					stopped = true
					if ctx.Err() != nil {
						return nil
					}
					res.Retry++
					if pushed {
						q.e.attempts = 0 // resetBehind reset it in the store; q.e was read before
					}
					q.e.attempts++
					q.e.due = d.now().Add(backoff(q.e.attempts))
					if res.NextDue.IsZero() || q.e.due.Before(res.NextDue) {
						res.NextDue = q.e.due
					}
					return putIfPresent(tx, q.key, q.e)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if stopped {
			return ctx.Err()
		}
	}
}

// dueFrom reads to's entries from the head while they are due, at most
// FlushWindow; when the head is not due it notes when it will be.
func (d *Device) dueFrom(to seal.DeviceID, res *FlushResult) ([]queued, error) {
	var batch []queued
	now := d.now()
	err := d.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bOutbox).Cursor()
		for k, v := c.Seek(to[:]); k != nil && bytes.HasPrefix(k, to[:]) && len(batch) < FlushWindow; k, v = c.Next() {
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			if now.Before(e.due) {
				if len(batch) == 0 && (res.NextDue.IsZero() || e.due.Before(res.NextDue)) {
					res.NextDue = e.due
				}
				return nil
			}
			m, err := getMessage(tx, e.msg)
			if err != nil {
				return err
			}
			batch = append(batch, queued{key: bytes.Clone(k), e: e, msg: m.inner})
		}
		return nil
	})
	return batch, err
}

// resetBehind restarts the backoff of to's entries from the head, after
// a push to to succeeded (seed 001: "a success to that recipient resets
// the backoff for the entries behind it"). Only a head that failed is
// given a backoff, so the entries that have one come first: it stops at
// the first entry without one.
func resetBehind(tx *bolt.Tx, to seal.DeviceID) error {
	b := tx.Bucket(bOutbox)
	var keys [][]byte
	var entries []entry
	c := b.Cursor()
	for k, v := c.Seek(to[:]); k != nil && bytes.HasPrefix(k, to[:]); k, v = c.Next() {
		e, err := decodeEntry(v)
		if err != nil {
			return err
		}
		if e.attempts == 0 && e.due.IsZero() {
			break
		}
		e.attempts, e.due = 0, time.Time{}
		keys, entries = append(keys, bytes.Clone(k)), append(entries, e)
	}
	for i, k := range keys { // written after the walk: a cursor does not survive writes
		if err := b.Put(k, entries[i].encode()); err != nil {
			return err
		}
	}
	return nil
}

// failReason is the sendFailed reason of a permanent refusal.
func failReason(perr error) string {
	var ref *RefusedError
	if errors.As(perr, &ref) && ref.Code == CodeTooLarge {
		return ReasonTooLarge
	}
	return ReasonMalformed
}

// RetryNow makes every queued entry due at once, keeping their attempt
// counts. Serve calls it each time the connection to the relay comes back
// (the seed: "immediately on reconnect"), so the backoff of entries that
// failed while it was down does not delay them.
func (d *Device) RetryNow() error {
	return d.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bOutbox)
		var keys, vals [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			if e.due.IsZero() {
				continue
			}
			e.due = time.Time{}
			keys, vals = append(keys, bytes.Clone(k)), append(vals, e.encode())
		}
		for i, k := range keys { // written after the walk: a cursor does not survive writes
			if err := b.Put(k, vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func getMessage(tx *bolt.Tx, id seal.MessageID) (message, error) {
	v := tx.Bucket(bMessages).Get(id[:])
	if v == nil {
		return message{}, errRecord
	}
	return decodeMessage(v)
}

// remove deletes a delivered entry, and its message once no entry refers
// to it. An entry already gone (another process delivered it) is fine.
func (d *Device) remove(tx *bolt.Tx, key []byte, e entry) error {
	out := tx.Bucket(bOutbox)
	if out.Get(key) == nil {
		return nil
	}
	if err := out.Delete(key); err != nil {
		return err
	}
	msgs := tx.Bucket(bMessages)
	m, err := getMessage(tx, e.msg)
	if err != nil {
		return err
	}
	if m.refs <= 1 {
		return msgs.Delete(e.msg[:])
	}
	m.refs--
	return msgs.Put(e.msg[:], m.encode())
}

// drop removes a failed entry and raises sendFailed.
func (d *Device) drop(tx *bolt.Tx, key []byte, e entry, msg seal.Inner, reason string) error {
	if tx.Bucket(bOutbox).Get(key) == nil {
		return nil
	}
	if err := d.remove(tx, key, e); err != nil {
		return err
	}
	return d.raise(tx, Event{Kind: EventSendFailed, MessageID: msg.ID, Group: msg.Group, Peer: e.to.ID().String(), Reason: reason})
}

func putIfPresent(tx *bolt.Tx, key []byte, e entry) error {
	b := tx.Bucket(bOutbox)
	if b.Get(key) == nil {
		return nil
	}
	return b.Put(key, e.encode())
}

// Outbox returns how many entries wait in the outbox.
func (d *Device) Outbox() (n int, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		n = countKeys(tx.Bucket(bOutbox))
		return nil
	})
	return n, err
}
