package seal

// Group manifests: the trust rule of Verify, canonical encoding, strict
// decoding, and the member limit at and past its edge.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestNewGroup(t *testing.T) {
	alice := fixedIdentity(t, 1)
	m, err := NewGroup(alice, "home", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "home" || m.Epoch() != 1 || m.Len() != 1 || m.Signer() != alice.ID() {
		t.Fatalf("new group: %q epoch %d, %d members, signed by %v", m.Name(), m.Epoch(), m.Len(), m.Signer())
	}
	if x, ok := m.Member(alice.ID()); !ok || x.Label != "laptop" || x.ID() != alice.ID() {
		t.Fatal("creator is not its member")
	}
	if err := m.Verify(nil); err != nil {
		t.Fatal(err)
	}
	back, err := ParseManifest(m.Bytes())
	if err != nil || !bytes.Equal(back.Bytes(), m.Bytes()) {
		t.Fatalf("round trip: %v", err)
	}
	if err := back.Verify(nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ name, label string }{{"", ""}, {"bad name", ""}, {"home", "tab\t"}} {
		if _, err := NewGroup(alice, bad.name, bad.label); err == nil {
			t.Errorf("NewGroup(%q, %q) accepted", bad.name, bad.label)
		}
	}
}

func TestManifestChain(t *testing.T) {
	alice, bob, carol, mallory := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3), fixedIdentity(t, 4)
	m1, _ := NewGroup(alice, "home", "laptop")
	m2, err := m1.Add(alice, bob.Public(), "phone")
	if err != nil {
		t.Fatal(err)
	}
	m3, err := m2.Add(bob, carol.Public(), "tablet") // any member may add
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ next, prev *Manifest }{{m2, m1}, {m3, m2}} {
		if err := step.next.Verify(step.prev); err != nil {
			t.Fatalf("epoch %d after %d: %v", step.next.Epoch(), step.prev.Epoch(), err)
		}
	}
	// A device that missed m2 does not know bob yet: m3 cannot be checked
	// against m1 until m2 arrives.
	wantErr(t, m3.Verify(m1), ErrUnauthorizedSigner)
	if m3.Epoch() != 3 || m3.Signer() != bob.ID() || m3.Len() != 3 {
		t.Fatalf("m3: epoch %d signer %v", m3.Epoch(), m3.Signer())
	}

	// Replays and older manifests are stale; a manifest of another group,
	// or from a device that was not a member, is refused.
	wantErr(t, m2.Verify(m2), ErrStaleManifest)
	wantErr(t, m2.Verify(m3), ErrStaleManifest)
	wantErr(t, m1.Verify(m2), ErrStaleManifest)
	work, _ := NewGroup(alice, "work", "")
	work2, _ := work.Add(alice, bob.Public(), "")
	wantErr(t, work2.Verify(m1), ErrWrongGroup)
	forged, err := build(mallory, "home", 3, append(m2.Members(), Member{Public: mallory.Public()}))
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, forged.Verify(m2), ErrUnauthorizedSigner)
	// Without a previous manifest only a new group, signed by its one
	// member at epoch 1, is accepted.
	wantErr(t, m2.Verify(nil), ErrUnauthorizedSigner)
	selfSigned2, _ := build(mallory, "home", 2, []Member{{Public: mallory.Public()}})
	wantErr(t, selfSigned2.Verify(nil), ErrUnauthorizedSigner)
	signedByOther, _ := build(mallory, "home", 1, []Member{{Public: alice.Public()}})
	wantErr(t, signedByOther.Verify(nil), ErrUnauthorizedSigner)

	// A changed byte under the signature: the label, then the signature.
	for _, i := range []int{bytes.Index(m3.raw, []byte("tablet")), len(m3.raw) - 1} {
		b := m3.Bytes()
		b[i] ^= 1
		p, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
		wantErr(t, p.Verify(m2), ErrBadSignature)
	}

	// A member removed, then the removal applied: carol leaves by
	// removing herself, which her membership of m3 allows.
	m4, err := m3.Remove(carol, carol.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := m4.Verify(m3); err != nil || m4.Has(carol.ID()) {
		t.Fatalf("leave: %v", err)
	}
	// Once out, carol can sign nothing the group accepts.
	wantErr(t, second(m4.Add(carol, mallory.Public(), "")), ErrNotMember)
	forged5, _ := build(carol, "home", 5, append(m4.Members(), Member{Public: carol.Public()}))
	wantErr(t, forged5.Verify(m4), ErrUnauthorizedSigner)
}

func TestManifestChangesRefused(t *testing.T) {
	alice, bob, carol := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3)
	m := group(t, "home", alice, bob)
	wantErr(t, second(m.Add(alice, bob.Public(), "again")), ErrAlreadyMember)
	wantErr(t, second(m.Remove(alice, carol.ID())), ErrNotMember)
	wantErr(t, second(m.Next(carol, m.Members())), ErrNotMember)
	if _, err := m.Add(alice, carol.Public(), "bad\x00label"); err == nil {
		t.Error("a control character in a label accepted")
	}
	if _, err := m.Next(alice, append(m.Members(), m.Members()[0])); err == nil {
		t.Error("a member listed twice accepted")
	}
	if _, err := m.Next(alice, nil); err == nil {
		t.Error("an empty group accepted")
	}
	if _, err := m.Next(alice, []Member{{Label: "no keys"}}); err == nil {
		t.Error("a member without keys accepted")
	}
	if _, err := m.Remove(alice, alice.ID(), bob.ID()); err == nil {
		t.Error("removing every member accepted")
	}
	last := &Manifest{name: "home", epoch: ^uint64(0), members: m.members}
	if _, err := last.Next(alice, m.Members()); err == nil {
		t.Error("an epoch past 2^64-1")
	}
}

func TestManifestAccessors(t *testing.T) {
	alice, bob, carol := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3)
	m := group(t, "home", carol, alice, bob)
	ms := m.Members()
	for i := 1; i < len(ms); i++ {
		a, b := ms[i-1].ID(), ms[i].ID()
		if bytes.Compare(a[:], b[:]) >= 0 {
			t.Fatal("members not in ascending order of device id")
		}
	}
	ms[0].Label = "changed"
	if m.Members()[0].Label == "changed" {
		t.Fatal("Members returned the manifest's own slice")
	}
	rs := m.Recipients(alice.ID())
	if len(rs) != 2 || rs[0].ID() == alice.ID() || rs[1].ID() == alice.ID() {
		t.Fatal("Recipients includes self")
	}
	if _, ok := m.SenderKey("work", alice.ID()); ok {
		t.Fatal("SenderKey answered for another group")
	}
	if p, ok := m.SenderKey("home", alice.ID()); !ok || !p.Equal(alice.Public()) {
		t.Fatal("SenderKey")
	}
	smaller, _ := m.Remove(alice, bob.ID())
	bigger, _ := smaller.Add(alice, fixedIdentity(t, 4).Public(), "")
	added, removed := bigger.Diff(m)
	if len(added) != 1 || added[0] != fixedIdentity(t, 4).ID() || len(removed) != 1 || removed[0] != bob.ID() {
		t.Fatalf("Diff: +%v -%v", added, removed)
	}
	if added, removed := m.Diff(nil); len(added) != 3 || removed != nil {
		t.Fatal("Diff against nothing")
	}
}

func identities(t testing.TB, n int) []*Identity {
	ids := make([]*Identity, n)
	for i := range ids {
		ids[i] = fixedIdentity(t, byte(10+i))
	}
	return ids
}

func TestMemberLimit(t *testing.T) {
	ids := identities(t, MaxGroupMembers+1)
	members := make([]Member, MaxGroupMembers)
	for i := range members {
		members[i] = Member{Public: ids[i].Public(), Label: strings.Repeat(string(rune('a'+i%26)), MaxLabelLen)}
	}
	m1, _ := NewGroup(ids[0], strings.Repeat("g", MaxGroupNameLen), members[0].Label)
	full, err := m1.Next(ids[0], members)
	if err != nil {
		t.Fatalf("%d members: %v", MaxGroupMembers, err)
	}
	if err := full.Verify(m1); err != nil {
		t.Fatal(err)
	}
	if n := len(full.Bytes()); n != MaxManifestBytes || n > MaxPayloadBytes {
		t.Fatalf("largest manifest %d bytes, MaxManifestBytes %d, payload limit %d", n, MaxManifestBytes, MaxPayloadBytes)
	}
	if back, err := ParseManifest(full.Bytes()); err != nil || back.Len() != MaxGroupMembers {
		t.Fatalf("parse of %d members: %v", MaxGroupMembers, err)
	}
	// The largest manifest travels in one control message.
	msg := mustMessage(t, KindGroupManifest, full.Name(), full.Bytes())
	if _, err := Open(ids[1], mustSeal(t, ids[0], ids[1].Public(), msg), full); err != nil {
		t.Fatal(err)
	}

	wantErr(t, second(full.Add(ids[0], ids[MaxGroupMembers].Public(), "")), ErrTooManyMembers)
	wantErr(t, second(full.Invite(ids[0], MinInviteTTL, testNow)), ErrTooManyMembers)
	if _, err := m1.Invite(ids[0], MinInviteTTL, testNow); err != nil {
		t.Fatal(err)
	}

	// 33 members on the wire: count byte 33 and one more member spliced
	// into a full manifest with empty labels (so the size bound is not
	// what refuses it).
	for i := range members {
		members[i].Label = ""
	}
	short, err := m1.Next(ids[0], members)
	if err != nil {
		t.Fatal(err)
	}
	b := short.Bytes()
	countAt := 4 + 1 + 1 + MaxGroupNameLen + 8
	if b[countAt] != MaxGroupMembers {
		t.Fatal("count byte not where the format puts it")
	}
	b[countAt] = MaxGroupMembers + 1
	extra := append(ids[MaxGroupMembers].Public().Bytes(), 0)
	b = append(b[:countAt+1:countAt+1], append(extra, b[countAt+1:]...)...)
	_, err = ParseManifest(b)
	wantErr(t, err, ErrTooManyMembers)
	wantErr(t, err, ErrMalformed)
}

func TestParseManifestIsStrict(t *testing.T) {
	alice, bob, carol := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3)
	m := group(t, "home", alice, bob, carol)
	good := m.Bytes()
	for n := 0; n < len(good); n++ {
		if _, err := ParseManifest(good[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	nameAt, epochAt := 6, 6+len("home")
	firstMember := epochAt + 8 + 1
	second := firstMember + PublicSize + 1 + len("device 0")
	swapped := bytes.Clone(good)
	// Swap the first two members (equal label lengths keep the offsets).
	a := bytes.Clone(good[firstMember : firstMember+PublicSize])
	copy(swapped[firstMember:], good[second:second+PublicSize])
	copy(swapped[second:], a)
	dup := bytes.Clone(good)
	copy(dup[second:], good[firstMember:firstMember+PublicSize])

	cases := map[string][]byte{
		"trailing byte":  append(bytes.Clone(good), 0),
		"magic":          flipAt(good, 0),
		"format":         flipAt(good, 4),
		"name":           setAt(good, nameAt, ' '),
		"epoch 0":        append(append(bytes.Clone(good[:epochAt]), make([]byte, 8)...), good[epochAt+8:]...),
		"no members":     append(append(bytes.Clone(good[:epochAt+8]), 0), good[len(good)-DeviceIDSize-64:]...),
		"out of order":   swapped,
		"listed twice":   dup,
		"bad key":        setAt(good, firstMember, 2),
		"label":          setAt(good, second-1, '\n'),
		"oversize input": make([]byte, MaxManifestBytes+1),
	}
	for name, b := range cases {
		if _, err := ParseManifest(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func flipAt(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }

func setAt(b []byte, i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }

func ExampleManifest_Verify() {
	alice, _ := Generate()
	bob, _ := Generate()
	m1, _ := NewGroup(alice, "home", "laptop")
	m2, _ := m1.Add(alice, bob.Public(), "phone")
	fmt.Println(m1.Verify(nil), m2.Verify(m1), m2.Epoch(), m2.Len())
	fmt.Println(m1.Verify(m2))
	// Output:
	// <nil> <nil> 2 2
	// seal: manifest epoch is not newer: group "home" epoch 1, holding 2
}
