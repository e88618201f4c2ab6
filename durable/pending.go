package durable

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// Manifests out of order (docs/durable.md, "Manifests out of order").
// Messages from one device arrive in the order it sent them, but nothing
// orders two devices: a manifest signed by a member this device does not
// know yet (the manifest that added it is still on its way) cannot be
// checked when it arrives, and a Leave or Revoke that skips an epoch
// cannot be checked against the change it names. Such a message is kept,
// sealed as it came, in the pending bucket, and opened and applied again
// after each manifest the device holds for its group, until it applies,
// is refused for good, or falls behind the manifest held.

// DefaultMaxPendingManifests is Options.MaxPendingManifests' default.
const DefaultMaxPendingManifests = 64

// ReasonTooManyPending is the delivery-issue reason of a manifest that
// would be kept while Options.MaxPendingManifests are kept already: it is
// acked and dropped.
const ReasonTooManyPending = "tooManyPending"

// A pendingManifest is a membership message kept until it can be
// checked, in the pending bucket under group | 0x00 | arrival (8):
//
//	format 1 (1) | relay seq (8) | epoch (8) | kind (1) | sender (20) | message id (16) | sealed blob
//
// epoch, kind, sender and id are what the message claims (for a sender
// not known yet, unverified); the blob is opened again at each retry.
type pendingManifest struct {
	key    []byte
	seq    uint64 // the blob's sequence on the relay, named in events
	epoch  uint64
	kind   seal.Kind
	sender seal.DeviceID
	id     seal.MessageID
	blob   []byte
}

const pendingFixed = 1 + 8 + 8 + 1 + seal.DeviceIDSize + seal.MessageIDSize

func (p *pendingManifest) encode() []byte {
	b := make([]byte, 0, pendingFixed+len(p.blob))
	b = append(b, recordFormat)
	b = binary.BigEndian.AppendUint64(b, p.seq)
	b = binary.BigEndian.AppendUint64(b, p.epoch)
	b = append(b, byte(p.kind))
	b = append(b, p.sender[:]...)
	b = append(b, p.id[:]...)
	return append(b, p.blob...)
}

func decodePending(b []byte) (pendingManifest, error) {
	var p pendingManifest
	if len(b) < pendingFixed || b[0] != recordFormat {
		return p, fmt.Errorf("%w: pending manifest of %d bytes", errRecord, len(b))
	}
	p.seq = binary.BigEndian.Uint64(b[1:9])
	p.epoch = binary.BigEndian.Uint64(b[9:17])
	p.kind = seal.Kind(b[17])
	copy(p.sender[:], b[18:38])
	copy(p.id[:], b[38:54])
	p.blob = bytes.Clone(b[pendingFixed:])
	if !keepable(p.kind) || p.epoch == 0 || len(p.blob) < seal.MinSealedSize || len(p.blob) > seal.MaxSealedSize {
		return pendingManifest{}, fmt.Errorf("%w: pending manifest (kind %d, epoch %d, blob of %d bytes)", errRecord, p.kind, p.epoch, len(p.blob))
	}
	return p, nil
}

// keepable: the kinds that carry a manifest. A Pair is never kept: its
// key is in its body, so its sender is never unknown.
func keepable(k seal.Kind) bool {
	return k == seal.KindGroupManifest || k == seal.KindLeave || k == seal.KindRevoke
}

func pendingPrefix(group string) []byte { return append([]byte(group), 0) }

// loadPending returns the group's pending manifests, lowest epoch first,
// then in arrival order.
func loadPending(tx *bolt.Tx, group string) ([]pendingManifest, error) {
	var ps []pendingManifest
	prefix := pendingPrefix(group)
	c := tx.Bucket(bPending).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		p, err := decodePending(v)
		if err != nil {
			return nil, err
		}
		p.key = bytes.Clone(k)
		ps = append(ps, p)
	}
	slices.SortStableFunc(ps, func(a, b pendingManifest) int {
		switch {
		case a.epoch < b.epoch:
			return -1
		case a.epoch > b.epoch:
			return 1
		}
		return 0
	})
	return ps, nil
}

// keep records p for its group in tx unless a copy is kept already (a
// replay changes nothing). It returns ReasonTooManyPending, and keeps
// nothing, when MaxPendingManifests are kept.
func (d *Device) keep(tx *bolt.Tx, group string, p pendingManifest) (refused string, err error) {
	ps, err := loadPending(tx, group)
	if err != nil {
		return "", err
	}
	for _, q := range ps {
		if q.sender == p.sender && q.id == p.id {
			return "", nil
		}
	}
	b := tx.Bucket(bPending)
	if countKeys(b) >= d.opts.MaxPendingManifests {
		return ReasonTooManyPending, nil
	}
	n, err := b.NextSequence()
	if err != nil {
		return "", err
	}
	return "", b.Put(binary.BigEndian.AppendUint64(pendingPrefix(group), n), p.encode())
}

// keepUnknownSigner takes a membership message whose sender this device
// does not know (Open's *seal.UnknownSenderError). If the manifest it
// claims to carry is not newer than the one held, it is old news (a
// replay, or a change by a member removed since) and is acked with no
// event, as any stale manifest. Otherwise it is kept if the device
// follows the group (holds a manifest of it, or waits for one it asked
// to join), else it is a delivery issue, as any unknown sender. Either
// way the blob is acked: what is kept is in device.db.
func (d *Device) keepUnknownSigner(ctx context.Context, s Session, seq uint64, blob []byte, us *seal.UnknownSenderError) error {
	issue := ""
	err := d.update(func(tx *bolt.Tx) error {
		cur, err := d.readGroup(us.Group)
		if err != nil {
			return err
		}
		join, err := pendingJoin(tx, us.Group)
		if err != nil {
			return err
		}
		switch {
		case cur != nil && us.Epoch <= cur.Epoch():
			return nil // behind the manifest held: a replay, whoever signed it
		case cur == nil && join == nil:
			issue = ReasonUnknownSender
			return nil
		}
		issue, err = d.keep(tx, us.Group, pendingManifest{seq: seq, epoch: us.Epoch, kind: us.Kind, sender: us.Sender, id: us.ID, blob: blob})
		return err
	})
	if err != nil {
		return err
	}
	if issue != "" {
		return d.dropBlob(ctx, s, seq, Event{Kind: EventDeliveryIssue, Reason: issue, MessageID: us.ID, Group: us.Group, Peer: us.Sender.String(), Err: us.Error()})
	}
	return d.ack(ctx, s, seq)
}

// skipsAhead reports whether a Leave or Revoke refused as not matching its
// change (seal.ErrBadChange) carries a manifest more than one epoch ahead
// of cur: it was made on a manifest this device has not received, so it
// is judged again once that one arrives.
func skipsAhead(cur *seal.Manifest, in seal.Inner, err error) (epoch uint64, ok bool) {
	if cur == nil || !errors.Is(err, seal.ErrBadChange) {
		return 0, false
	}
	m, perr := seal.ParseManifest(in.Body)
	if perr != nil || m.Epoch() <= cur.Epoch()+1 {
		return 0, false
	}
	return m.Epoch(), true
}

// applyManifest decides a membership message against cur, the manifest
// held for its group: the first manifest of a group this device asked to
// join (applyInvited), or any other change (seal.ApplyControl).
func (d *Device) applyManifest(tx *bolt.Tx, cur *seal.Manifest, in seal.Inner) (next *seal.Manifest, invited bool, err error) {
	next, invited, err = d.applyInvited(tx, cur, in)
	if !invited && err == nil {
		next, err = seal.ApplyControl(cur, in)
	}
	return next, invited, err
}

// setGroup holds m for its group, then retries the group's pending
// manifests: m may name the signer one of them waits for.
func (d *Device) setGroup(tx *bolt.Tx, m *seal.Manifest) error {
	if err := d.writeGroup(m); err != nil {
		return err
	}
	return d.retryPending(tx, m.Name())
}

// retryPending opens and applies the group's pending manifests again,
// lowest epoch first, starting over after each one that applies, until a
// pass applies none. Each one applied raises the epoch held, so the
// passes end.
func (d *Device) retryPending(tx *bolt.Tx, group string) error {
	for {
		ps, err := loadPending(tx, group)
		if err != nil {
			return err
		}
		applied := false
		for _, p := range ps {
			if applied, err = d.retryOne(tx, group, p); err != nil || applied {
				break
			}
		}
		if err != nil || !applied {
			return err
		}
	}
}

// retryOne opens and applies one pending manifest. It stays kept while
// its signer is still unknown or it still skips ahead; it is deleted when
// it applies, falls behind the manifest held (as a replay would, with no
// event), or is refused (a delivery issue, as on arrival).
func (d *Device) retryOne(tx *bolt.Tx, group string, p pendingManifest) (applied bool, err error) {
	cur, err := d.readGroup(group)
	if err != nil {
		return false, err
	}
	del := func() error { return tx.Bucket(bPending).Delete(p.key) }
	refuse := func(err error) (bool, error) {
		if derr := del(); derr != nil {
			return false, derr
		}
		return false, d.raise(tx, Event{Kind: EventDeliveryIssue, Reason: issueReason(err), MessageID: p.id, Group: group, Peer: p.sender.String(), Err: err.Error(), RelaySeq: p.seq})
	}
	if cur != nil && p.epoch <= cur.Epoch() {
		return false, del()
	}
	in, err := seal.Open(d.me, p.blob, d.sendersTx(tx))
	if errors.Is(err, seal.ErrUnknownSender) {
		return false, nil
	}
	if err != nil {
		return refuse(err)
	}
	next, invited, err := d.applyManifest(tx, cur, in)
	if _, ahead := skipsAhead(cur, in, err); ahead {
		return false, nil
	}
	if errors.Is(err, seal.ErrStaleManifest) {
		return false, del()
	}
	if err != nil {
		return refuse(err)
	}
	if err := del(); err != nil {
		return false, err
	}
	if invited {
		if err := tx.Bucket(bJoins).Delete([]byte(group)); err != nil {
			return false, err
		}
	}
	return true, d.writeGroup(next)
}

// deletePending forgets the group's pending manifests (the group is
// deleted).
func deletePending(tx *bolt.Tx, group string) error {
	ps, err := loadPending(tx, group)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := tx.Bucket(bPending).Delete(p.key); err != nil {
			return err
		}
	}
	return nil
}

// PendingManifests returns how many membership messages are kept until
// their signer is known (docs/durable.md, "Manifests out of order").
func (d *Device) PendingManifests() (n int, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		n = countKeys(tx.Bucket(bPending))
		return nil
	})
	return n, err
}
