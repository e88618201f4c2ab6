package durable

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// Pairing over the durable path (docs/durable.md, "Pairing"):
//
//	inviter: Invite records the token (tokens bucket)
//	joiner:  Join queues a Pair sealed to the inviter and records the join (joins bucket)
//	inviter: the Pair arrives; VerifyPair; the token is marked used; the next
//	         manifest (Manifest.Add) goes to every member, the joiner included
//	joiner:  the manifest arrives, opened with the token as its only sender;
//	         seal.ApplyInvited; the group is held and the join forgotten
//
// Each inviter step is one transaction of device.db, so a token is used
// once even when two processes receive for the device.

// The delivery-issue reasons of a Pair the inviter refuses, besides those
// of Open and of the manifest (issueReason).
const (
	ReasonUnknownToken = "unknownToken" // no token of this device has the Pair's token id
	ReasonTokenUsed    = "tokenUsed"    // the token was used by another device
)

// A tokenRecord is an invitation this device made, in the tokens bucket
// under its id:
//
//	format 1 (1) | expiry, Unix s (8) | used (1) | joiner id (20), zero while unused | token text
//
// The text holds the secret, which VerifyPair needs; device.db is 0600.
type tokenRecord struct {
	tok    *seal.Token
	used   bool
	joiner seal.DeviceID
}

const tokenRecordFixed = 1 + 8 + 1 + seal.DeviceIDSize

func (r *tokenRecord) encode() []byte {
	text := r.tok.Text()
	b := make([]byte, 0, tokenRecordFixed+len(text))
	b = append(b, recordFormat)
	b = binary.BigEndian.AppendUint64(b, uint64(r.tok.Expires().Unix()))
	used := byte(0)
	if r.used {
		used = 1
	}
	b = append(b, used)
	b = append(b, r.joiner[:]...)
	return append(b, text...)
}

func decodeToken(b []byte) (tokenRecord, error) {
	var r tokenRecord
	bad := func(what string) (tokenRecord, error) {
		return tokenRecord{}, fmt.Errorf("%w: token record: %s", errRecord, what)
	}
	if len(b) < tokenRecordFixed || b[0] != recordFormat {
		return bad("short or unknown format")
	}
	switch b[9] {
	case 0:
	case 1:
		r.used = true
	default:
		return bad("used flag")
	}
	copy(r.joiner[:], b[10:30])
	if r.used == r.joiner.IsZero() {
		return bad("joiner")
	}
	text := string(b[30:])
	tok, err := seal.ParseToken(text)
	if err != nil || tok.Text() != text {
		return bad("token")
	}
	if tok.Expires().Unix() != int64(binary.BigEndian.Uint64(b[1:9])) {
		return bad("expiry")
	}
	r.tok = tok
	return r, nil
}

// Invite makes a token for joining group, valid for ttl (seal.MinInviteTTL
// to seal.MaxInviteTTL), and records it in device.db (its id, expiry, not
// used), so that the Pair answering it is accepted once, when it arrives
// on the recipient path (Run). Show Token.Text only to the device that is
// to join. The record is deleted TokenRetention after the token's expiry.
func (d *Device) Invite(group string, ttl time.Duration) (*seal.Token, error) {
	if d.isClosed() {
		return nil, ErrClosed
	}
	var tok *seal.Token
	err := d.update(func(tx *bolt.Tx) error {
		m, err := d.member(group)
		if err != nil {
			return err
		}
		if tok, err = m.Invite(d.me, ttl, d.now()); err != nil {
			return err
		}
		if err := sweepTokens(tx, d.now()); err != nil {
			return err
		}
		return putToken(tx, &tokenRecord{tok: tok})
	})
	return tok, err
}

// member returns the manifest held for group if it lists this device.
func (d *Device) member(group string) (*seal.Manifest, error) {
	if !seal.ValidGroupName(group) {
		return nil, &ErrNotMember{Group: group, Status: StatusNoGroup}
	}
	m, err := d.readGroup(group)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, &ErrNotMember{Group: group, Status: StatusNoGroup}
	}
	if !m.Has(d.ID()) {
		return nil, &ErrNotMember{Group: group, Status: StatusRemoved}
	}
	return m, nil
}

// Join answers an invitation: it parses the token's text, queues a Pair
// message sealed to the inviter (with the key the token carries) in the
// outbox, and remembers the join, in one transaction. The Pair goes with
// the next Flush, survives restarts and never expires. When the inviter's
// manifest arrives (Run), it is accepted with seal.ApplyInvited and the
// group is held. It fails with seal.ErrBadToken, seal.ErrTokenExpired,
// or seal.ErrAlreadyMember for a group this device is in.
func (d *Device) Join(ctx context.Context, tokenText, label string) error {
	if d.isClosed() {
		return ErrClosed
	}
	tok, err := seal.ParseToken(tokenText)
	if err != nil {
		return err
	}
	if tok.Inviter().ID() == d.ID() {
		return fmt.Errorf("%w: this device made the invitation", seal.ErrAlreadyMember)
	}
	msg, err := tok.PairMessage(d.me, label, d.now())
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.update(func(tx *bolt.Tx) error {
		m, err := d.readGroup(tok.Group())
		if err != nil {
			return err
		}
		if m != nil && m.Has(d.ID()) {
			return fmt.Errorf("%w: group %s", seal.ErrAlreadyMember, tok.Group())
		}
		if err := d.enqueue(tx, msg, []seal.Public{tok.Inviter()}); err != nil {
			return err
		}
		return tx.Bucket(bJoins).Put([]byte(tok.Group()), []byte(tok.Text()))
	})
}

// PendingJoin returns the token of a join to group that waits for the
// inviter's manifest, or nil.
func (d *Device) PendingJoin(group string) (tok *seal.Token, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		tok, err = pendingJoin(tx, group)
		return err
	})
	return tok, err
}

func pendingJoin(tx *bolt.Tx, group string) (*seal.Token, error) {
	v := tx.Bucket(bJoins).Get([]byte(group))
	if v == nil {
		return nil, nil
	}
	tok, err := seal.ParseToken(string(v))
	if err != nil {
		return nil, fmt.Errorf("%w: join of %s: %v", errRecord, group, err)
	}
	return tok, nil
}

// acceptPair is the inviter's side of a Pair message, with the library
// as the handler and no dedup: the token it answers must be this
// device's, unused, and VerifyPair must pass; then, in one transaction,
// the token is marked used and the next manifest, with the joiner, is
// held and queued to every member. A replay of the accepted Pair (the
// token used by that same joiner) is acked and changes nothing; a Pair
// for a token another device used is a delivery issue.
func (d *Device) acceptPair(ctx context.Context, s Session, seq uint64, in seal.Inner) error {
	var issue error
	var reason string
	refuse := func(err error, r string) error {
		issue, reason = err, r
		return nil
	}
	err := d.update(func(tx *bolt.Tx) error {
		p, err := seal.ParsePair(in.Body)
		if err != nil {
			return refuse(err, ReasonMalformed)
		}
		if err := sweepTokens(tx, d.now()); err != nil {
			return err
		}
		tokens := tx.Bucket(bTokens)
		v := tokens.Get(p.Token[:])
		if v == nil {
			return refuse(fmt.Errorf("durable: no invitation %v on this device", p.Token), ReasonUnknownToken)
		}
		rec, err := decodeToken(v)
		if err != nil {
			return err
		}
		if rec.used {
			if rec.joiner == p.Joiner.ID() {
				return nil // the accepted Pair again
			}
			return refuse(fmt.Errorf("durable: invitation %v was used by %v", p.Token, rec.joiner), ReasonTokenUsed)
		}
		if _, err := rec.tok.VerifyPair(in, d.now()); err != nil {
			return refuse(err, issueReason(err))
		}
		cur, err := d.member(in.Group)
		if err != nil {
			return refuse(err, "notMember")
		}
		next, err := cur.Add(d.me, p.Joiner, p.Label)
		if err != nil {
			return refuse(err, issueReason(err))
		}
		msg, err := seal.NewMessage(seal.KindGroupManifest, next.Name(), next.Bytes(), d.now())
		if err != nil {
			return err
		}
		msg.Sender = d.ID()
		if err := d.changeGroup(tx, cur, msg, next); err != nil {
			return err
		}
		rec.used, rec.joiner = true, p.Joiner.ID()
		return putToken(tx, &rec)
	})
	if err != nil {
		return err
	}
	if issue != nil {
		return d.dropBlob(ctx, s, seq, Event{Kind: EventDeliveryIssue, Reason: reason, MessageID: in.ID, Group: in.Group, Peer: in.Sender.String(), Err: issue.Error()})
	}
	return d.ack(ctx, s, seq)
}

// applyInvited takes the first manifest of a group this device asked to
// join (a pending join, and no manifest that lists it): the token's
// inviter must have signed it and it must list this device
// (seal.ApplyInvited). It reports false when no join is pending, for the
// ordinary path to decide.
func (d *Device) applyInvited(tx *bolt.Tx, cur *seal.Manifest, in seal.Inner) (next *seal.Manifest, ok bool, err error) {
	if in.Kind != seal.KindGroupManifest || cur != nil && cur.Has(d.ID()) {
		return nil, false, nil
	}
	tok, err := pendingJoin(tx, in.Group)
	if err != nil || tok == nil {
		return nil, false, err
	}
	next, err = seal.ApplyInvited(tok, d.ID(), in)
	if err == nil && cur != nil && next.Epoch() <= cur.Epoch() {
		err = fmt.Errorf("%w: epoch %d, holding %d", seal.ErrStaleManifest, next.Epoch(), cur.Epoch())
	}
	return next, true, err
}

// Leave sends a Leave to the group's other members and keeps the manifest
// without this device, so Send then fails with ErrNotMember(removed).
// The last member does not leave: its group file is deleted.
func (d *Device) Leave(ctx context.Context, group string) error {
	if d.isClosed() {
		return ErrClosed
	}
	m, err := d.member(group)
	if err != nil {
		return err
	}
	if m.Len() == 1 {
		return d.update(func(tx *bolt.Tx) error {
			if err := deletePending(tx, group); err != nil {
				return err
			}
			return d.deleteGroup(group)
		})
	}
	next, err := m.Remove(d.me, d.ID())
	if err != nil {
		return err
	}
	_, err = d.ChangeGroup(ctx, seal.KindLeave, next)
	return err
}

// Revoke removes the devices ids from group and sends the Revoke to the
// members left and to the removed devices.
func (d *Device) Revoke(ctx context.Context, group string, ids ...seal.DeviceID) error {
	if d.isClosed() {
		return ErrClosed
	}
	m, err := d.member(group)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if id == d.ID() {
			return errors.New("durable: a device does not revoke itself: leave the group")
		}
		if !m.Has(id) {
			return fmt.Errorf("%w: %v in group %s", seal.ErrNotMember, id, group)
		}
	}
	next, err := m.Remove(d.me, ids...)
	if err != nil {
		return err
	}
	_, err = d.ChangeGroup(ctx, seal.KindRevoke, next)
	return err
}

// deleteGroup removes the group's file; callers hold device.db's lock.
func (d *Device) deleteGroup(name string) error {
	if err := os.Remove(d.groupPath(name)); err != nil {
		return err
	}
	if dd, err := os.Open(filepath.Join(d.dir, groupsDir)); err == nil {
		err = dd.Sync()
		dd.Close()
		return err
	}
	return nil
}
