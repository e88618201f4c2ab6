package durable

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"busbar/seal"
)

var errHeld = errors.New("test: push held back")

// holdPushesTo makes every push to dev fail (a temporary error: the
// entry waits for its backoff) until the returned release is called; the
// caller then calls RetryNow on the senders so the next Flush pushes at
// once.
func holdPushesTo(t *testing.T, r *storeRelay, dev *Device) (release func()) {
	t.Helper()
	r.mu.Lock()
	r.before = func(blob []byte) error {
		if to, _ := seal.PeekRecipient(blob); to == dev.ID() {
			return errHeld
		}
		return nil
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.before = nil
		r.mu.Unlock()
	}
}

// copyPushesTo records every blob pushed to dev from now on.
func copyPushesTo(r *storeRelay, dev *Device) func() [][]byte {
	var mu sync.Mutex
	var got [][]byte
	r.mu.Lock()
	r.after = func(blob []byte) error {
		if to, _ := seal.PeekRecipient(blob); to == dev.ID() {
			mu.Lock()
			got = append(got, slices.Clone(blob))
			mu.Unlock()
		}
		return nil
	}
	r.mu.Unlock()
	return func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

func pendingCount(t *testing.T, d *Device) int {
	t.Helper()
	n, err := d.PendingManifests()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func epochOf(t *testing.T, d *Device) uint64 {
	t.Helper()
	m, err := d.Group("home")
	if err != nil || m == nil {
		t.Fatalf("no manifest held (%v)", err)
	}
	return m.Epoch()
}

// A manifest signed by a member the device does not know yet (it arrives
// before the manifest that added its signer) is kept, survives a restart,
// is not kept twice when replayed, and applies once the manifest that
// introduces its signer arrives: every device ends with the same
// manifest, as if they had come in order.
func TestManifestBeforeItsSignerIsKnown(t *testing.T) {
	r, devs, cs := pairedOverRelay(t, 4)
	a, b, c, d := devs[0], devs[1], devs[2], devs[3]

	// b admits c (epoch 3, to a and c); a does not get it yet.
	join(t, c, invite(t, b), "c")
	flush(t, c, r)
	mustDrain(t, b, r, cs[1])
	release := holdPushesTo(t, r, a)
	if res := flush(t, b, r); res.Retry != 1 {
		t.Fatalf("b's flush: %+v", res)
	}
	release()
	mustDrain(t, c, r, cs[2])

	// c admits d (epoch 4, signed by c, to a, b and d): a gets it first.
	join(t, d, invite(t, c), "d")
	flush(t, d, r)
	mustDrain(t, c, r, cs[2])
	copies := copyPushesTo(r, a)
	flush(t, c, r)
	r.after = nil
	if len(copies()) != 1 {
		t.Fatalf("%d pushes to a", len(copies()))
	}
	mustDrain(t, a, r, cs[0])
	if n := pendingCount(t, a); n != 1 || epochOf(t, a) != 2 || inbox(r, a) != 0 {
		t.Fatalf("a: %d pending, epoch %d, inbox %d", n, epochOf(t, a), inbox(r, a))
	}
	noEvents(t, a)

	// The same blob again: nothing changes.
	if _, err := r.st.Push(context.Background(), a.ID().String(), copies()[0]); err != nil {
		t.Fatal(err)
	}
	mustDrain(t, a, r, cs[0])
	if n := pendingCount(t, a); n != 1 || epochOf(t, a) != 2 || inbox(r, a) != 0 {
		t.Fatalf("after the replay a has %d pending, epoch %d", n, epochOf(t, a))
	}
	noEvents(t, a)

	// After a restart, epoch 3 arrives: a holds it, then epoch 4.
	a = reopen(t, a, testOpts(nil))
	devs[0] = a
	if err := b.RetryNow(); err != nil {
		t.Fatal(err)
	}
	flush(t, b, r)
	mustDrain(t, a, r, cs[0])
	if n := pendingCount(t, a); n != 0 || epochOf(t, a) != 4 {
		t.Fatalf("a: %d pending, epoch %d", n, epochOf(t, a))
	}
	settle(t, r, devs, cs)
	sameManifest(t, 4, 4, devs...)
	noEvents(t, devs...)

	send(t, d, "from d")
	settle(t, r, devs, cs)
	for i := range 3 {
		if !slices.Equal(cs[i].bodies(), []string{"from d"}) {
			t.Fatalf("device %d handled %q", i, cs[i].bodies())
		}
	}
	noEvents(t, devs...)
}

// A Leave made on a manifest this device has not received (it skips an
// epoch, and against the manifest held it adds a device) is kept and
// applied after the manifest it was made on.
func TestLeaveBeforeTheManifestItFollows(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b, c, d := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	devs := []*Device{a, b, c, d}
	cs := []*collector{{}, {}, {}, {}}
	m := group(t, a, b, c)
	withD, err := m.Add(b.Identity(), d.Identity().Public(), "d")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.InstallGroup(withD); err != nil { // d was told out of band
		t.Fatal(err)
	}
	release := holdPushesTo(t, r, a)
	sendChange(t, b, r, withD)
	release()
	mustDrain(t, c, r, cs[2])
	if err := c.Leave(context.Background(), "home"); err != nil {
		t.Fatal(err)
	}
	flush(t, c, r)
	mustDrain(t, a, r, cs[0])
	if n := pendingCount(t, a); n != 1 || epochOf(t, a) != m.Epoch() {
		t.Fatalf("a: %d pending, epoch %d", n, epochOf(t, a))
	}
	noEvents(t, a)

	if err := b.RetryNow(); err != nil {
		t.Fatal(err)
	}
	settle(t, r, devs, cs)
	got := sameManifest(t, m.Epoch()+2, 3, devs...)
	if got.Has(c.ID()) || !got.Has(d.ID()) {
		t.Fatal("c is still a member, or d is not")
	}
	if n := pendingCount(t, a); n != 0 {
		t.Fatalf("a: %d pending", n)
	}
	noEvents(t, devs...)
}

// A device that asked to join can get a manifest from a member other than
// its inviter before the inviter's manifest that admits it: it keeps it
// and applies it after.
func TestJoinerGetsALaterManifestFirst(t *testing.T) {
	r, devs, cs := pairedOverRelay(t, 3)
	a, b, c := devs[0], devs[1], devs[2]
	join(t, c, invite(t, a), "c")
	flush(t, c, r)
	mustDrain(t, a, r, cs[0]) // epoch 3, with c, queued to b and c
	release := holdPushesTo(t, r, c)
	flush(t, a, r)
	release()
	mustDrain(t, b, r, cs[1])
	m3, _ := b.Group("home")
	sendChange(t, b, r, mustManifest(t)(m3.Add(b.Identity(), mustGenerate(t).Public(), "e")))
	mustDrain(t, c, r, cs[2])
	if n := pendingCount(t, c); n != 1 {
		t.Fatalf("c: %d pending", n)
	}
	if m, _ := c.Group("home"); m != nil {
		t.Fatal("c holds the group before its inviter's manifest")
	}
	noEvents(t, c)

	if err := a.RetryNow(); err != nil {
		t.Fatal(err)
	}
	settle(t, r, devs, cs)
	sameManifest(t, 4, 4, devs...)
	if p, _ := c.PendingJoin("home"); p != nil || pendingCount(t, c) != 0 {
		t.Fatal("c still waits")
	}
	noEvents(t, devs...)
}

// At most MaxPendingManifests are kept: at the bound one more is acked
// and dropped as deliveryIssue(tooManyPending). The ones kept apply when
// their signer is introduced.
func TestMaxPendingManifests(t *testing.T) {
	r := newRelay(t, relayOpts())
	o := testOpts(nil)
	o.MaxPendingManifests = 2
	a, b, x := newDevice(t, o), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	m2 := group(t, a, b)
	m3, err := m2.Add(b.Identity(), x.Identity().Public(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := x.InstallGroup(m3); err != nil {
		t.Fatal(err)
	}
	// x makes epochs 4, 5 and 6; a does not know x.
	for m := m3; m.Epoch() < 6; {
		m = addStranger(t, x, m)
	}
	flush(t, x, r)
	if inbox(r, a) != 3 {
		t.Fatalf("a's inbox %d", inbox(r, a))
	}
	mustDrain(t, a, r, &collector{})
	if n := pendingCount(t, a); n != 2 || inbox(r, a) != 0 {
		t.Fatalf("a: %d pending, inbox %d", n, inbox(r, a))
	}
	evs := takeEvents(t, a)
	if len(evs) != 1 || evs[0].Kind != EventDeliveryIssue || evs[0].Reason != ReasonTooManyPending || evs[0].Peer != x.ID().String() {
		t.Fatalf("events %+v", evs)
	}

	sendChange(t, b, r, m3)
	mustDrain(t, a, r, &collector{})
	if n := pendingCount(t, a); n != 0 || epochOf(t, a) != 5 {
		t.Fatalf("a: %d pending, epoch %d (the third was dropped at the bound)", n, epochOf(t, a))
	}
	noEvents(t, a)
}

// A kept manifest the group moves past before its signer is known is
// forgotten with no event, as a replay would be; one from a device that
// follows no such group is a delivery issue, as before.
func TestPendingManifestFallsBehind(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b, x := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	m2 := group(t, a, b)
	m3, err := m2.Add(b.Identity(), x.Identity().Public(), "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Device{b, x} { // not sent to a
		if err := d.InstallGroup(m3); err != nil {
			t.Fatal(err)
		}
	}
	fromX := addStranger(t, x, m3)
	flush(t, x, r)
	mustDrain(t, a, r, &collector{})
	if pendingCount(t, a) != 1 {
		t.Fatal("not kept")
	}
	// b, which a knows, sends epoch 4 without x: a holds it, and x's
	// epoch 4 is behind it.
	fromB, err := m3.Remove(b.Identity(), x.ID())
	if err != nil {
		t.Fatal(err)
	}
	sendChange(t, b, r, fromB)
	mustDrain(t, a, r, &collector{})
	if n := pendingCount(t, a); n != 0 || epochOf(t, a) != 4 {
		t.Fatalf("a: %d pending, epoch %d", n, epochOf(t, a))
	}
	noEvents(t, a)

	// A device that holds no group "home" and joins none keeps nothing.
	outsider := newDevice(t, testOpts(nil))
	msg, err := seal.NewMessage(seal.KindGroupManifest, "home", fromX.Bytes(), t0)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := seal.Seal(x.Identity(), outsider.Identity().Public(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Push(context.Background(), outsider.ID().String(), blob); err != nil {
		t.Fatal(err)
	}
	mustDrain(t, outsider, r, &collector{})
	if evs := takeEvents(t, outsider); len(evs) != 1 || evs[0].Reason != ReasonUnknownSender || pendingCount(t, outsider) != 0 {
		t.Fatalf("events %+v, %d pending", evs, pendingCount(t, outsider))
	}
}

// Four changes, each made by a device the one before introduced (b adds
// x, x adds y, x leaves, y revokes b), reach a device in every order,
// then all again: it ends holding the last manifest, keeps nothing and
// raises no event, as when they come in order.
func TestManifestsInEveryOrder(t *testing.T) {
	b, x, y := mustGenerate(t), mustGenerate(t), mustGenerate(t)
	r := newRelay(t, relayOpts())
	r.idle = 20 * time.Millisecond // every blob is in the inbox before a session starts
	for _, order := range permutations([]int{0, 1, 2, 3}) {
		a := newDevice(t, testOpts(nil))
		m2 := mustManifest(t)(seal.NewGroup(b, "home", "b"))
		m2 = mustManifest(t)(m2.Add(b, a.Identity().Public(), "a"))
		m3 := mustManifest(t)(m2.Add(b, x.Public(), "x"))
		m4 := mustManifest(t)(m3.Add(x, y.Public(), "y"))
		m5 := mustManifest(t)(m4.Remove(x, x.ID()))
		m6 := mustManifest(t)(m5.Remove(y, b.ID()))
		if err := a.InstallGroup(m2); err != nil {
			t.Fatal(err)
		}
		changes := []struct {
			by   *seal.Identity
			kind seal.Kind
			m    *seal.Manifest
		}{{b, seal.KindGroupManifest, m3}, {x, seal.KindGroupManifest, m4}, {x, seal.KindLeave, m5}, {y, seal.KindRevoke, m6}}
		var blobs [][]byte
		for _, c := range changes {
			msg, err := seal.NewMessage(c.kind, "home", c.m.Bytes(), t0)
			if err != nil {
				t.Fatal(err)
			}
			blob, err := seal.Seal(c.by, a.Identity().Public(), msg)
			if err != nil {
				t.Fatal(err)
			}
			blobs = append(blobs, blob)
		}
		for range 2 {
			for _, i := range order {
				if _, err := r.st.Push(context.Background(), a.ID().String(), blobs[i]); err != nil {
					t.Fatal(err)
				}
			}
			mustDrain(t, a, r, &collector{})
			held, err := a.Group("home")
			if err != nil || held == nil || held.Epoch() != m6.Epoch() || !slices.Equal(held.Bytes(), m6.Bytes()) {
				t.Fatalf("order %v: holding %v (%v)", order, held, err)
			}
			if n := pendingCount(t, a); n != 0 {
				t.Fatalf("order %v: %d pending", order, n)
			}
			if evs := takeEvents(t, a); len(evs) != 0 {
				t.Fatalf("order %v: events %+v", order, evs)
			}
		}
	}
}

// addStranger has d add a new identity to m and queue the change.
func addStranger(t *testing.T, d *Device, m *seal.Manifest) *seal.Manifest {
	t.Helper()
	next := mustManifest(t)(m.Add(d.Identity(), mustGenerate(t).Public(), ""))
	queueChange(t, d, next)
	return next
}

// sendChange has d make next its manifest and push it to the members.
func sendChange(t *testing.T, d *Device, r *storeRelay, next *seal.Manifest) {
	t.Helper()
	queueChange(t, d, next)
	flush(t, d, r)
}

func queueChange(t *testing.T, d *Device, next *seal.Manifest) {
	t.Helper()
	if _, err := d.ChangeGroup(context.Background(), seal.KindGroupManifest, next); err != nil {
		t.Fatal(err)
	}
}

func mustGenerate(t *testing.T) *seal.Identity {
	t.Helper()
	id, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustManifest(t *testing.T) func(*seal.Manifest, error) *seal.Manifest {
	return func(m *seal.Manifest, err error) *seal.Manifest {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// permutations returns every order of s.
func permutations(s []int) [][]int {
	if len(s) <= 1 {
		return [][]int{slices.Clone(s)}
	}
	var out [][]int
	for i := range s {
		rest := slices.Concat(s[:i], s[i+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]int{s[i]}, p...))
		}
	}
	return out
}
