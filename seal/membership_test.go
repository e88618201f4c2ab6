package seal

// Membership end to end, through sealed blobs: pairing with a token,
// rejected pairs, leave and revoke, replays that change nothing, and a
// removed device that cannot read what is sent after its removal.

import (
	"bytes"
	"testing"
	"time"
)

// sendManifest seals a membership message carrying m from author to every
// member of m but the author, plus extra, and returns the blobs by
// recipient.
func sendManifest(t *testing.T, kind Kind, author *Identity, m *Manifest, extra ...Public) map[DeviceID][]byte {
	t.Helper()
	msg := mustMessage(t, kind, m.Name(), m.Bytes())
	out := map[DeviceID][]byte{}
	for _, p := range append(m.Recipients(author.ID()), extra...) {
		out[p.ID()] = mustSeal(t, author, p, msg)
	}
	return out
}

func TestPairing(t *testing.T) {
	alice, bob, carol := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3)
	held := map[DeviceID]*Manifest{}
	m1 := group(t, "home", alice, carol)
	held[alice.ID()], held[carol.ID()] = m1, m1

	// Alice invites; the text travels to bob out of band.
	tok, err := m1.Invite(alice, time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	issued := map[TokenID]*Token{tok.ID(): tok} // alice's record of her tokens
	bobTok, err := ParseToken(tok.Text())
	if err != nil {
		t.Fatal(err)
	}

	// Bob answers with a Pair sealed to the inviter.
	pairMsg, err := bobTok.PairMessage(bob, "phone", testNow)
	if err != nil {
		t.Fatal(err)
	}
	pairBlob := mustSeal(t, bob, bobTok.Inviter(), pairMsg)

	// Alice opens it (bob is no member: his key comes from the Pair),
	// finds her token and checks the proof.
	in, err := Open(alice, pairBlob, held[alice.ID()])
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePair(in.Body)
	if err != nil {
		t.Fatal(err)
	}
	mine := issued[p.Token]
	if mine == nil {
		t.Fatal("pair answers no token of alice's")
	}
	p, err = mine.VerifyPair(in, testNow.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Joiner.Equal(bob.Public()) || p.Label != "phone" {
		t.Fatalf("pair: %v %q", p.Joiner, p.Label)
	}
	delete(issued, p.Token) // one join per token: the record is the inviter's to keep

	// Alice sends the next manifest to every member, bob included.
	m2, err := held[alice.ID()].Add(alice, p.Joiner, p.Label)
	if err != nil {
		t.Fatal(err)
	}
	held[alice.ID()] = m2
	blobs := sendManifest(t, KindGroupManifest, alice, m2)

	// Bob holds no manifest: the token is what he trusts.
	in, err = Open(bob, blobs[bob.ID()], bobTok)
	if err != nil {
		t.Fatal(err)
	}
	held[bob.ID()], err = ApplyInvited(bobTok, bob.ID(), in)
	if err != nil {
		t.Fatal(err)
	}
	// Carol checks it against what she holds.
	in, err = Open(carol, blobs[carol.ID()], held[carol.ID()])
	if err != nil {
		t.Fatal(err)
	}
	held[carol.ID()], err = ApplyControl(held[carol.ID()], in)
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range held {
		if !bytes.Equal(m.Bytes(), m2.Bytes()) {
			t.Fatalf("%s holds epoch %d", id, m.Epoch())
		}
	}
	// Bob is a member now: carol reads what he sends.
	fromBob := mustSeal(t, bob, carol.Public(), mustMessage(t, KindSync, "home", []byte("hello")))
	if _, err := Open(carol, fromBob, held[carol.ID()]); err != nil {
		t.Fatal(err)
	}

	// Replays change nothing: the Pair again, the manifest again.
	wantErr(t, second(held[alice.ID()].Add(alice, p.Joiner, p.Label)), ErrAlreadyMember)
	in, _ = Open(carol, blobs[carol.ID()], held[carol.ID()])
	wantErr(t, second(ApplyControl(held[carol.ID()], in)), ErrStaleManifest)
}

func TestPairRefused(t *testing.T) {
	alice, bob, mallory := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 4)
	m := group(t, "home", alice)
	tok, _ := m.Invite(alice, time.Hour, testNow)
	otherTok, _ := m.Invite(alice, time.Hour, testNow)
	work, _ := NewGroup(alice, "work", "")
	workTok, _ := work.Invite(alice, time.Hour, testNow)

	pairMsg, _ := tok.PairMessage(bob, "phone", testNow)
	in, err := Open(alice, mustSeal(t, bob, alice.Public(), pairMsg), m)
	if err != nil {
		t.Fatal(err)
	}
	// At and past the expiry.
	for _, at := range []time.Time{tok.Expires(), tok.Expires().Add(time.Hour)} {
		wantErr(t, second(tok.VerifyPair(in, at)), ErrTokenExpired)
	}
	if _, err := tok.VerifyPair(in, tok.Expires().Add(-time.Second)); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	// Checked against another token of the same group, or of another.
	wantErr(t, second(otherTok.VerifyPair(in, testNow)), ErrBadProof)
	wantErr(t, second(workTok.VerifyPair(in, testNow)), ErrWrongGroup)

	// Mallory takes bob's Pair body and sends it as hers: Open finds the
	// key in the body is not the sender's.
	stolen := mustMessage(t, KindPair, "home", in.Body)
	wantErr(t, second(Open(alice, mustSeal(t, mallory, alice.Public(), stolen), m)), ErrUnknownSender)
	// Mallory makes a Pair for herself with a guessed secret.
	guess := *tok
	guess.secret[0] ^= 1
	guessed, _ := guess.PairMessage(mallory, "", testNow)
	in2, err := Open(alice, mustSeal(t, mallory, alice.Public(), guessed), m)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, second(tok.VerifyPair(in2, testNow)), ErrBadProof)
	// Bob's proof with mallory's label: the proof binds the label too.
	p, _ := ParsePair(in.Body)
	p.Label = "mallory"
	relabeled := in
	relabeled.Body = p.bytes()
	wantErr(t, second(tok.VerifyPair(relabeled, testNow)), ErrBadProof)
	// Not a pair at all.
	if _, err := tok.VerifyPair(mustMessage(t, KindSync, "home", nil), testNow); err == nil {
		t.Fatal("a sync message verified as a pair")
	}
	if _, err := tok.VerifyPair(mustMessage(t, KindPair, "home", []byte("junk")), testNow); err == nil {
		t.Fatal("a junk pair verified")
	}
	junk := mustSeal(t, bob, alice.Public(), mustMessage(t, KindPair, "home", []byte("junk")))
	wantErr(t, second(Open(alice, junk, m)), ErrMalformed)
	if _, err := tok.PairMessage(bob, "bad\nlabel", testNow); err == nil {
		t.Fatal("a bad label accepted")
	}
}

func TestJoinerAcceptsOnlyTheInvitersManifest(t *testing.T) {
	alice, bob, carol, mallory := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3), fixedIdentity(t, 4)
	m1 := group(t, "home", alice, carol)
	tok, _ := m1.Invite(alice, time.Hour, testNow)
	withBob, _ := m1.Add(alice, bob.Public(), "phone")
	msgFrom := func(author *Identity, m *Manifest) Inner {
		msg := mustMessage(t, KindGroupManifest, m.Name(), m.Bytes())
		msg.Sender = author.ID()
		return msg
	}
	if _, err := ApplyInvited(tok, bob.ID(), msgFrom(alice, withBob)); err != nil {
		t.Fatal(err)
	}
	// Signed by another member than the inviter.
	byCarol, _ := m1.Add(carol, bob.Public(), "phone")
	wantErr(t, second(ApplyInvited(tok, bob.ID(), msgFrom(carol, byCarol))), ErrUnauthorizedSigner)
	// Not listing bob.
	withMallory, _ := m1.Add(alice, mallory.Public(), "")
	wantErr(t, second(ApplyInvited(tok, bob.ID(), msgFrom(alice, withMallory))), ErrNotMember)
	// Another group of the inviter's.
	work := group(t, "work", alice, bob)
	wantErr(t, second(ApplyInvited(tok, bob.ID(), msgFrom(alice, work))), ErrWrongGroup)
	// A manifest of mallory's own, under the group's name, claiming to be
	// signed by alice (her id as signer, her signature missing).
	fake, _ := build(mallory, "home", 9, []Member{{Public: alice.Public()}, {Public: bob.Public()}})
	raw := fake.Bytes()
	aid := alice.ID()
	copy(raw[len(raw)-64-DeviceIDSize:], aid[:])
	forged, err := ParseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, forged.VerifyInvited(tok, bob.ID()), ErrBadSignature)
	// A message of another kind.
	if _, err := ApplyInvited(tok, bob.ID(), mustMessage(t, KindSync, "home", withBob.Bytes())); err == nil {
		t.Fatal("a sync message admitted a joiner")
	}
}

func TestLeaveAndRevoke(t *testing.T) {
	alice, bob, carol, dave := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3), fixedIdentity(t, 4)
	m := group(t, "home", alice, bob, carol, dave)
	asMsg := func(kind Kind, author *Identity, next *Manifest) Inner {
		msg := mustMessage(t, kind, next.Name(), next.Bytes())
		msg.Sender = author.ID()
		return msg
	}

	// Dave leaves: he signs the manifest without himself.
	afterLeave, _ := m.Remove(dave, dave.ID())
	got, err := ApplyControl(m, asMsg(KindLeave, dave, afterLeave))
	if err != nil || got.Has(dave.ID()) || got.Epoch() != m.Epoch()+1 {
		t.Fatalf("leave: %v", err)
	}
	wantErr(t, second(ApplyControl(got, asMsg(KindLeave, dave, afterLeave))), ErrStaleManifest)

	// Alice revokes carol.
	afterRevoke, _ := got.Remove(alice, carol.ID())
	next, err := ApplyControl(got, asMsg(KindRevoke, alice, afterRevoke))
	if err != nil || next.Has(carol.ID()) {
		t.Fatalf("revoke: %v", err)
	}
	// Carol, told of it, applies it too and finds herself out.
	if out, err := ApplyControl(got, asMsg(KindRevoke, alice, afterRevoke)); err != nil || out.Has(carol.ID()) {
		t.Fatalf("revoked device: %v", err)
	}
	wantErr(t, second(ApplyControl(next, asMsg(KindRevoke, alice, afterRevoke))), ErrStaleManifest)

	// Changes that do not match their kind.
	removeBob, _ := m.Remove(alice, bob.ID())
	wantErr(t, second(ApplyControl(m, asMsg(KindLeave, alice, removeBob))), ErrBadChange)
	selfRevoke, _ := m.Remove(alice, alice.ID())
	wantErr(t, second(ApplyControl(m, asMsg(KindRevoke, alice, selfRevoke))), ErrBadChange)
	same, _ := m.Next(alice, m.Members())
	wantErr(t, second(ApplyControl(m, asMsg(KindRevoke, alice, same))), ErrBadChange)
	wantErr(t, second(ApplyControl(m, asMsg(KindLeave, alice, same))), ErrBadChange)
	if _, err := ApplyControl(m, asMsg(KindGroupManifest, alice, same)); err != nil {
		t.Fatalf("a manifest that changes nothing but the epoch: %v", err)
	}
	// The manifest must be the sender's, for the message's group.
	wantErr(t, second(ApplyControl(m, asMsg(KindRevoke, bob, removeBob))), ErrUnauthorizedSigner)
	wrongGroup := asMsg(KindRevoke, alice, removeBob)
	wrongGroup.Group = "work"
	wantErr(t, second(ApplyControl(m, wrongGroup)), ErrWrongGroup)
	// No manifest held, a Sync, a Pair, junk.
	wantErr(t, second(ApplyControl(nil, asMsg(KindRevoke, alice, removeBob))), ErrNotMember)
	for _, msg := range []Inner{mustMessage(t, KindSync, "home", removeBob.Bytes()), mustMessage(t, KindPair, "home", nil)} {
		if _, err := ApplyControl(m, msg); err == nil {
			t.Fatalf("%s applied", msg.Kind)
		}
	}
	wantErr(t, second(ApplyControl(m, mustMessage(t, KindGroupManifest, "home", []byte("junk")))), ErrMalformed)
}

// Sealing is per recipient device: after carol's removal, a sender seals
// to the members of the manifest it holds, which do not include her, so
// nothing sent afterwards opens for her — not even with the header
// rewritten to name her — and what she sends is refused.
func TestRemovedDeviceCannotReadLaterMessages(t *testing.T) {
	alice, bob, carol := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3)
	before := group(t, "home", alice, bob, carol)
	after, err := before.Remove(alice, carol.ID())
	if err != nil {
		t.Fatal(err)
	}
	msg := mustMessage(t, KindSync, "home", []byte("after carol left"))
	var blobs [][]byte
	for _, p := range after.Recipients(alice.ID()) {
		if p.ID() == carol.ID() {
			t.Fatal("a removed device is still a recipient")
		}
		blobs = append(blobs, mustSeal(t, alice, p, msg))
	}
	if len(blobs) != 1 {
		t.Fatalf("%d recipients, want bob only", len(blobs))
	}
	cid := carol.ID()
	for _, b := range blobs {
		wantErr(t, second(Open(carol, b, before)), ErrNotForMe)
		forged := bytes.Clone(b)
		copy(forged[6:HeaderSize], cid[:])
		wantErr(t, second(Open(carol, forged, before)), ErrBadSeal)
	}
	fromCarol := mustSeal(t, carol, bob.Public(), mustMessage(t, KindSync, "home", []byte("still here")))
	wantErr(t, second(Open(bob, fromCarol, after)), ErrUnknownSender)
}
