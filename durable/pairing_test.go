package durable

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"busbar/seal"
)

// settle runs the devices against r until no outbox holds an entry and
// no inbox a blob: each round every device flushes, then every device
// with mail drains its inbox. cs[i] collects what devs[i] handles.
func settle(t *testing.T, r *storeRelay, devs []*Device, cs []*collector) {
	t.Helper()
	for range 6 {
		busy := false
		for _, d := range devs {
			if res := flush(t, d, r); res.Pushed > 0 {
				busy = true
			}
		}
		for i, d := range devs {
			if inbox(r, d) > 0 {
				busy = true
				mustDrain(t, d, r, cs[i])
			}
		}
		if !busy {
			return
		}
	}
	t.Fatal("still delivering after 6 rounds")
}

// pairedOverRelay makes n devices: the first creates group home and the
// second joins it through the relay; the others hold nothing yet.
func pairedOverRelay(t *testing.T, n int) (*storeRelay, []*Device, []*collector) {
	t.Helper()
	r := newRelay(t, relayOpts())
	devs := make([]*Device, n)
	cs := make([]*collector, n)
	for i := range devs {
		devs[i], cs[i] = newDevice(t, testOpts(nil)), &collector{}
	}
	if _, err := devs[0].CreateGroup("home", "device 0"); err != nil {
		t.Fatal(err)
	}
	join(t, devs[1], invite(t, devs[0]), "device 1")
	settle(t, r, devs[:2], cs[:2])
	return r, devs, cs
}

func invite(t *testing.T, d *Device) *seal.Token {
	t.Helper()
	tok, err := d.Invite("home", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func join(t *testing.T, d *Device, tok *seal.Token, label string) {
	t.Helper()
	if err := d.Join(context.Background(), tok.Text(), label); err != nil {
		t.Fatal(err)
	}
}

// sameManifest checks every device holds the same manifest of group home,
// of the given epoch and size, and returns it.
func sameManifest(t *testing.T, epoch uint64, members int, devs ...*Device) *seal.Manifest {
	t.Helper()
	var first *seal.Manifest
	for i, d := range devs {
		m, err := d.Group("home")
		if err != nil || m == nil {
			t.Fatalf("device %d holds no manifest (%v)", i, err)
		}
		if m.Epoch() != epoch || m.Len() != members {
			t.Fatalf("device %d: epoch %d with %d members, want %d with %d", i, m.Epoch(), m.Len(), epoch, members)
		}
		if first == nil {
			first = m
		} else if !bytes.Equal(m.Bytes(), first.Bytes()) {
			t.Fatalf("device %d holds another manifest of epoch %d", i, epoch)
		}
	}
	return first
}

func noEvents(t *testing.T, devs ...*Device) {
	t.Helper()
	for i, d := range devs {
		if evs := takeEvents(t, d); len(evs) != 0 {
			t.Fatalf("device %d: events %+v", i, evs)
		}
	}
}

// A invites, B joins (its Pair waiting in an outbox that survives a
// restart); after the relay has carried the Pair and the manifest, both
// hold the same manifest and each one's Send reaches the other's handler.
func TestPairing(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	if _, err := a.CreateGroup("home", "a"); err != nil {
		t.Fatal(err)
	}
	tok := invite(t, a)
	join(t, b, tok, "b's laptop")
	if p, err := b.PendingJoin("home"); err != nil || p == nil || p.ID() != tok.ID() {
		t.Fatalf("pending join %v, %v", p, err)
	}
	if n, _ := b.Outbox(); n != 1 {
		t.Fatalf("b's outbox %d", n)
	}
	if _, err := b.Send(context.Background(), "home", []byte("early")); !errors.Is(err, seal.ErrNotMember) {
		t.Fatalf("Send before the manifest: %v", err)
	}
	b = reopen(t, b, testOpts(nil)) // the Pair is on disk
	ca, cb := &collector{}, &collector{}
	settle(t, r, []*Device{a, b}, []*collector{ca, cb})
	m := sameManifest(t, 2, 2, a, b)
	if mb, ok := m.Member(b.ID()); !ok || mb.Label != "b's laptop" {
		t.Fatalf("b in the manifest: %+v %v", mb, ok)
	}
	if p, _ := b.PendingJoin("home"); p != nil {
		t.Fatal("the join is still pending")
	}
	noEvents(t, a, b)

	send(t, b, "from b")
	send(t, a, "from a")
	settle(t, r, []*Device{a, b}, []*collector{ca, cb})
	if !slices.Equal(ca.bodies(), []string{"from b"}) || !slices.Equal(cb.bodies(), []string{"from a"}) {
		t.Fatalf("a handled %q, b handled %q", ca.bodies(), cb.bodies())
	}
	if ca.msgs[0].From.ID() != b.ID() || ca.msgs[0].From.Label != "b's laptop" {
		t.Fatalf("from %+v", ca.msgs[0].From)
	}
	noEvents(t, a, b)
}

// One token admits one device: the second joiner's Pair is a delivery
// issue, and a replay of the accepted Pair changes nothing.
func TestPairTokenUsedTwice(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b, c := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	if _, err := a.CreateGroup("home", "a"); err != nil {
		t.Fatal(err)
	}
	tok := invite(t, a)
	join(t, b, tok, "b")
	join(t, c, tok, "c")
	r.after = func(blob []byte) error { // every push lands twice
		to, _ := seal.PeekRecipient(blob)
		_, err := r.st.Push(context.Background(), to.String(), blob)
		return err
	}
	flush(t, b, r)
	r.after = nil
	flush(t, c, r)
	if inbox(r, a) != 3 {
		t.Fatalf("a's inbox %d", inbox(r, a))
	}
	mustDrain(t, a, r, &collector{})
	evs := takeEvents(t, a)
	if len(evs) != 1 || evs[0].Kind != EventDeliveryIssue || evs[0].Reason != ReasonTokenUsed || evs[0].Peer != c.ID().String() {
		t.Fatalf("events %+v", evs)
	}
	if inbox(r, a) != 0 {
		t.Fatal("a Pair left unacked")
	}
	settle(t, r, []*Device{a, b, c}, []*collector{{}, {}, {}})
	sameManifest(t, 2, 2, a, b)
	if m, _ := c.Group("home"); m != nil {
		t.Fatal("c holds the group")
	}
	if p, _ := c.PendingJoin("home"); p == nil {
		t.Fatal("c's join was forgotten")
	}
	noEvents(t, b, c)
}

// An expired token is refused by the joiner, and by the inviter when the
// Pair reaches it after the expiry.
func TestPairExpiredToken(t *testing.T) {
	r := newRelay(t, relayOpts())
	// Both on fake clocks that start at t0: b on the real clock would find
	// the one-minute token expired when this test starts more than a
	// minute after the package's tests did (a loaded machine).
	ca := newClock()
	a, b := newDevice(t, testOpts(ca)), newDevice(t, testOpts(newClock()))
	if _, err := a.CreateGroup("home", "a"); err != nil {
		t.Fatal(err)
	}
	tok, err := a.Invite("home", seal.MinInviteTTL)
	if err != nil {
		t.Fatal(err)
	}
	join(t, b, tok, "b")
	flush(t, b, r)
	ca.Add(seal.MinInviteTTL) // valid before the expiry, not at it
	mustDrain(t, a, r, &collector{})
	evs := takeEvents(t, a)
	if len(evs) != 1 || evs[0].Reason != "tokenExpired" {
		t.Fatalf("events %+v", evs)
	}
	if m, _ := a.Group("home"); m.Epoch() != 1 || m.Len() != 1 {
		t.Fatalf("a's group: epoch %d, %d members", m.Epoch(), m.Len())
	}

	cb := newClock()
	late := newDevice(t, testOpts(cb))
	cb.Add(seal.MinInviteTTL)
	if err := late.Join(context.Background(), tok.Text(), "late"); !errors.Is(err, seal.ErrTokenExpired) {
		t.Fatalf("Join with an expired token: %v", err)
	}
	if n, _ := late.Outbox(); n != 0 {
		t.Fatal("a refused Join queued a Pair")
	}
}

// A Pair for a token the inviter never recorded, or with a damaged
// token, is refused.
func TestPairRefusals(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	m, err := a.CreateGroup("home", "a")
	if err != nil {
		t.Fatal(err)
	}
	unrecorded, err := m.Invite(a.Identity(), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	join(t, b, unrecorded, "b")
	flush(t, b, r)
	mustDrain(t, a, r, &collector{})
	if evs := takeEvents(t, a); len(evs) != 1 || evs[0].Reason != ReasonUnknownToken {
		t.Fatalf("events %+v", evs)
	}
	if err := b.Join(context.Background(), "busbar-invite:nope", "b"); !errors.Is(err, seal.ErrBadToken) {
		t.Fatalf("damaged token: %v", err)
	}
	if err := a.Join(context.Background(), invite(t, a).Text(), "a"); !errors.Is(err, seal.ErrAlreadyMember) {
		t.Fatalf("own token: %v", err)
	}
	if _, err := b.Invite("home", time.Hour); !errors.Is(err, seal.ErrNotMember) {
		t.Fatalf("Invite by a non-member: %v", err)
	}
}

// A third device, invited by the second, joins: all three hold epoch 3,
// then a leave and a revoke reach everyone.
func TestPairThirdDeviceLeaveRevoke(t *testing.T) {
	r, devs, cs := pairedOverRelay(t, 3)
	a, b, c := devs[0], devs[1], devs[2]
	join(t, c, invite(t, b), "c")
	settle(t, r, devs, cs)
	sameManifest(t, 3, 3, a, b, c)

	send(t, c, "from c")
	settle(t, r, devs, cs)
	if !slices.Equal(cs[0].bodies(), []string{"from c"}) || !slices.Equal(cs[1].bodies(), []string{"from c"}) {
		t.Fatalf("a %q, b %q", cs[0].bodies(), cs[1].bodies())
	}

	if err := c.Leave(context.Background(), "home"); err != nil {
		t.Fatal(err)
	}
	settle(t, r, devs, cs)
	m := sameManifest(t, 4, 2, a, b, c)
	if m.Has(c.ID()) {
		t.Fatal("c still a member")
	}
	if err := a.Revoke(context.Background(), "home", b.ID()); err != nil {
		t.Fatal(err)
	}
	settle(t, r, devs, cs)
	sameManifest(t, 5, 1, a, b)
	var nm *ErrNotMember
	if _, err := b.Send(context.Background(), "home", []byte("x")); !errors.As(err, &nm) || nm.Status != StatusRemoved {
		t.Fatalf("b after its revocation: %v", err)
	}
	noEvents(t, devs...)
	if err := a.Leave(context.Background(), "home"); err != nil {
		t.Fatal(err)
	}
	if m, _ := a.Group("home"); m != nil {
		t.Fatal("the last member's group is still there")
	}
}
