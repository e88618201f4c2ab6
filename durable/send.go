package durable

import (
	"context"
	"fmt"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// Send queues body for every other member of group and returns the new
// message's id once the outbox entries (one per recipient, in one
// transaction) are on disk. It needs no relay: whichever process calls
// Flush pushes them. The body is checked first, so a refused Send writes
// nothing: ErrPayloadTooLarge past Options.MaxPayloadBytes, *ErrNotMember
// for a group this device is not in, ErrClosed after Close.
//
// A group of one member has no recipients: Send returns an id and queues
// nothing.
func (d *Device) Send(ctx context.Context, group string, body []byte) (seal.MessageID, error) {
	if d.isClosed() {
		return seal.MessageID{}, ErrClosed
	}
	if max := d.opts.MaxPayloadBytes; len(body) > max {
		return seal.MessageID{}, ErrPayloadTooLarge{Size: len(body), Max: max}
	}
	if err := ctx.Err(); err != nil {
		return seal.MessageID{}, err
	}
	if !seal.ValidGroupName(group) {
		return seal.MessageID{}, &ErrNotMember{Group: group, Status: StatusNoGroup}
	}
	msg, err := seal.NewMessage(seal.KindSync, group, append([]byte{}, body...), d.now())
	if err != nil {
		return seal.MessageID{}, err
	}
	if err := d.fail(FailSenderBeforeOutbox); err != nil {
		return seal.MessageID{}, err
	}
	err = d.update(func(tx *bolt.Tx) error {
		m, err := d.readGroup(group)
		if err != nil {
			return err
		}
		if m == nil {
			return &ErrNotMember{Group: group, Status: StatusNoGroup}
		}
		if !m.Has(d.ID()) {
			return &ErrNotMember{Group: group, Status: StatusRemoved}
		}
		return d.enqueue(tx, msg, m.Recipients(d.ID()))
	})
	if err != nil {
		return seal.MessageID{}, err
	}
	return msg.ID, d.fail(FailSenderAfterOutbox)
}

// ChangeGroup makes next the manifest held for its group and sends it to
// the members as a control message of kind (seal.KindGroupManifest,
// KindLeave or KindRevoke), in one transaction: next must follow the
// manifest held (seal.Manifest.Verify) and be signed by this device.
// Every member of next but this device is a recipient; a Revoke goes to
// the removed devices too, so that they learn of it. Control entries never
// expire.
func (d *Device) ChangeGroup(ctx context.Context, kind seal.Kind, next *seal.Manifest) (seal.MessageID, error) {
	if d.isClosed() {
		return seal.MessageID{}, ErrClosed
	}
	switch kind {
	case seal.KindGroupManifest, seal.KindLeave, seal.KindRevoke:
	default:
		return seal.MessageID{}, fmt.Errorf("durable: ChangeGroup of kind %v", kind)
	}
	if next.Signer() != d.ID() {
		return seal.MessageID{}, fmt.Errorf("durable: the manifest is signed by %v, not this device", next.Signer())
	}
	msg, err := seal.NewMessage(kind, next.Name(), next.Bytes(), d.now())
	if err != nil {
		return seal.MessageID{}, err
	}
	if err := ctx.Err(); err != nil {
		return seal.MessageID{}, err
	}
	msg.Sender = d.ID()
	// Check the change as a recipient will, before anything is written.
	err = d.update(func(tx *bolt.Tx) error {
		prev, err := d.readGroup(next.Name())
		if err != nil {
			return err
		}
		return d.changeGroup(tx, prev, msg, next)
	})
	if err != nil {
		return seal.MessageID{}, err
	}
	return msg.ID, nil
}

// changeGroup checks the control message msg carrying next against prev,
// the manifest held, queues it to next's members (and to the removed ones
// for a Revoke) and holds next, in tx.
func (d *Device) changeGroup(tx *bolt.Tx, prev *seal.Manifest, msg seal.Inner, next *seal.Manifest) error {
	if _, err := seal.ApplyControl(prev, msg); err != nil {
		return err
	}
	to := next.Recipients(d.ID())
	if msg.Kind == seal.KindRevoke {
		_, removed := next.Diff(prev)
		for _, id := range removed {
			if mb, ok := prev.Member(id); ok {
				to = append(to, mb.Public)
			}
		}
	}
	if err := d.enqueue(tx, msg, to); err != nil {
		return err
	}
	return d.setGroup(tx, next)
}

// enqueue writes msg once and one entry per recipient, in tx.
func (d *Device) enqueue(tx *bolt.Tx, msg seal.Inner, to []seal.Public) error {
	if len(to) == 0 {
		return nil
	}
	d.changedIn(tx)
	out := tx.Bucket(bOutbox)
	rec := message{refs: uint32(len(to)), inner: msg}
	if err := tx.Bucket(bMessages).Put(msg.ID[:], rec.encode()); err != nil {
		return err
	}
	for _, p := range to {
		seq, err := out.NextSequence()
		if err != nil {
			return err
		}
		e := entry{msg: msg.ID, to: p}
		if err := out.Put(entryKey(p.ID(), seq), e.encode()); err != nil {
			return err
		}
	}
	return nil
}
