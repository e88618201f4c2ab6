package seal

// Sealed blobs: round trips, sizes at and past the limits, the clear
// header, the version rule, wrong recipients, tampering, unknown and
// revoked senders, forged signatures, and what a blob does not reveal.

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSealOpenRoundTrip(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	m := group(t, "home", alice, bob)
	bodies := [][]byte{nil, []byte("x"), bytes.Repeat([]byte("0123456789abcdef"), 64), bytes.Repeat([]byte{7}, MaxPayloadBytes)}
	for _, kind := range []Kind{KindSync, KindGroupManifest, KindLeave, KindRevoke} {
		for _, body := range bodies {
			msg := mustMessage(t, kind, "home", body)
			blob := mustSeal(t, alice, bob.Public(), msg)
			if want := SealOverhead + innerFixed + len("home") + len(body); len(blob) != want {
				t.Fatalf("blob of %d bytes, want %d", len(blob), want)
			}
			got, err := Open(bob, blob, m)
			if err != nil {
				t.Fatalf("%s, %d bytes: %v", kind, len(body), err)
			}
			if got.Kind != kind || got.ID != msg.ID || got.Sender != alice.ID() || got.Group != "home" ||
				!got.Timestamp.Equal(testNow.Truncate(time.Millisecond)) || !bytes.Equal(got.Body, body) {
				t.Fatalf("opened %+v, sealed %+v", got, msg)
			}
		}
	}
}

func TestSizesAtTheLimits(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	long := strings.Repeat("g", MaxGroupNameLen)
	m := group(t, long, alice, bob)

	max := mustSeal(t, alice, bob.Public(), mustMessage(t, KindSync, long, make([]byte, MaxPayloadBytes)))
	if len(max) != MaxSealedSize || MaxSealedSize != 62780 {
		t.Fatalf("largest blob %d bytes, MaxSealedSize %d", len(max), MaxSealedSize)
	}
	if _, err := Open(bob, max, m); err != nil {
		t.Fatal(err)
	}
	min := mustSeal(t, alice, bob.Public(), mustMessage(t, KindSync, "g", nil))
	if len(min) != MinSealedSize || MinSealedSize != 1277 {
		t.Fatalf("smallest blob %d bytes, MinSealedSize %d", len(min), MinSealedSize)
	}
	wantErr(t, second(Open(bob, append(bytes.Clone(max), 0), m)), ErrMalformed)
	wantErr(t, second(Open(bob, min[:len(min)-1], m)), ErrMalformed)

	// One byte past the payload limit, refused when the message is made
	// and, for a message grown afterwards, when it is sealed.
	_, err := NewMessage(KindSync, "home", make([]byte, MaxPayloadBytes+1), testNow)
	var tooLarge ErrPayloadTooLarge
	if !errors.As(err, &tooLarge) || tooLarge != (ErrPayloadTooLarge{Size: 61441, Max: 61440}) {
		t.Fatalf("NewMessage with 61441 bytes: %v", err)
	}
	msg := mustMessage(t, KindSync, "home", nil)
	msg.Body = make([]byte, MaxPayloadBytes+1)
	if _, err := Seal(alice, bob.Public(), msg); !errors.As(err, &tooLarge) {
		t.Fatalf("Seal with 61441 bytes: %v", err)
	}
	if MaxPayloadBytes != 61440 {
		t.Fatal("the payload limit is 61,440 bytes")
	}
}

func second[T any](_ T, err error) error { return err }

func TestHeaderIsClearAndNamesOnlyTheRecipient(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	blob := mustSeal(t, alice, bob.Public(), mustMessage(t, KindSync, "home", []byte("hi")))
	if string(blob[:4]) != "BBSL" || blob[4] != 0 || blob[5] != 1 {
		t.Fatalf("header % x", blob[:6])
	}
	v, err := PeekVersion(blob)
	if err != nil || v != Version {
		t.Fatalf("PeekVersion = %d, %v", v, err)
	}
	to, err := PeekRecipient(blob)
	if err != nil || to != bob.ID() {
		t.Fatalf("PeekRecipient = %v, %v", to, err)
	}
	for _, b := range [][]byte{nil, []byte("BBSL\x00"), []byte("XXSL\x00\x01"), append([]byte("BBSL\x00\x01"), make([]byte, 19)...)} {
		if _, err := PeekRecipient(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("PeekRecipient(% x): %v", b, err)
		}
	}
	if _, err := PeekVersion([]byte("BBSL\x00")); !errors.Is(err, ErrMalformed) {
		t.Fatal("PeekVersion read a truncated version")
	}
}

// A sealed blob holds none of the body, the sender's id or keys, the group
// name or the message id in the clear.
func TestBlobRevealsNoPlaintext(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	body := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20))
	msg := mustMessage(t, KindSync, "secret-group-name", body)
	blob := mustSeal(t, alice, bob.Public(), msg)
	const window = 8
	for i := 0; i+window <= len(body); i++ {
		if bytes.Contains(blob, body[i:i+window]) {
			t.Fatalf("blob contains body bytes %q", body[i:i+window])
		}
	}
	aliceID := alice.ID()
	for name, secret := range map[string][]byte{
		"sender id": aliceID[:], "sender signing key": alice.Public().SigningKey(),
		"sender text id": []byte(aliceID.String()), "group": []byte(msg.Group), "message id": msg.ID[:],
	} {
		if bytes.Contains(blob, secret) {
			t.Errorf("blob contains the %s", name)
		}
	}
}

func TestVersionRule(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	m := group(t, "home", alice, bob)
	blob := mustSeal(t, alice, bob.Public(), mustMessage(t, KindSync, "home", []byte("hi")))
	at := func(v uint16) []byte {
		b := bytes.Clone(blob)
		b[4], b[5] = byte(v>>8), byte(v)
		return b
	}
	for _, v := range []uint16{2, 0x100, 0xffff} {
		_, err := Open(bob, at(v), m)
		var newer ErrVersionNewer
		if !errors.As(err, &newer) || newer.V != v {
			t.Fatalf("version %d: %v", v, err)
		}
		// A relay and a recipient still read the header of a newer blob,
		// even one this build could not size-check.
		b := append(at(v), make([]byte, 70000)...)
		if got, err := PeekVersion(b); got != v || err != nil {
			t.Fatalf("PeekVersion of version %d: %d, %v", v, got, err)
		}
		if got, err := PeekRecipient(b); got != bob.ID() || err != nil {
			t.Fatalf("PeekRecipient of version %d: %v, %v", v, got, err)
		}
		if _, err := Open(bob, b, m); !errors.As(err, &newer) {
			t.Fatalf("oversize newer blob: %v", err)
		}
	}
	_, err := Open(bob, at(0), m)
	var older ErrVersionOlder
	if !errors.As(err, &older) || older.V != 0 {
		t.Fatalf("version 0: %v", err)
	}
	if CheckVersion(Version) != nil || CheckVersion(Version+1) != (ErrVersionNewer{Version + 1}) || CheckVersion(Version-1) != (ErrVersionOlder{Version - 1}) {
		t.Fatal("CheckVersion")
	}
	if s := (ErrVersionNewer{2}).Error(); !strings.Contains(s, "2 is newer than 1") {
		t.Fatal(s)
	}
	if s := (ErrVersionOlder{0}).Error(); !strings.Contains(s, "0 is older than 1") {
		t.Fatal(s)
	}
}

func TestOpenByAnotherDevice(t *testing.T) {
	alice, bob, carol := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3)
	m := group(t, "home", alice, bob, carol)
	blob := mustSeal(t, alice, bob.Public(), mustMessage(t, KindSync, "home", []byte("for bob")))
	wantErr(t, second(Open(carol, blob, m)), ErrNotForMe)
	// Carol rewrites the header to name herself: the seal binds the header
	// and her key is not the one it was sealed to.
	b := bytes.Clone(blob)
	cid := carol.ID()
	copy(b[6:HeaderSize], cid[:])
	wantErr(t, second(Open(carol, b, m)), ErrBadSeal)
}

// Every byte of a blob is covered: changing any one of them makes Open
// fail, with the error of the part it belongs to.
func TestTamperingWithAnyByte(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	m := group(t, "home", alice, bob)
	blob := mustSeal(t, alice, bob.Public(), mustMessage(t, KindSync, "home", []byte("sixteen bytes ok")))
	for i := range blob {
		for _, mask := range []byte{0x01, 0x80} {
			b := bytes.Clone(blob)
			b[i] ^= mask
			_, err := Open(bob, b, m)
			var newer ErrVersionNewer
			var older ErrVersionOlder
			var ok bool
			switch {
			case i < 4:
				ok = errors.Is(err, ErrMalformed)
			case i < 6:
				ok = errors.As(err, &newer) || errors.As(err, &older)
			case i < HeaderSize:
				ok = errors.Is(err, ErrNotForMe)
			default:
				ok = errors.Is(err, ErrBadSeal)
			}
			if !ok {
				t.Fatalf("byte %d ^ %#x: %v", i, mask, err)
			}
		}
	}
}

func TestUnknownAndRevokedSenders(t *testing.T) {
	alice, bob, carol, mallory := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3), fixedIdentity(t, 4)
	m := group(t, "home", alice, bob, carol)
	fromCarol := mustSeal(t, carol, bob.Public(), mustMessage(t, KindSync, "home", []byte("hi")))
	if _, err := Open(bob, fromCarol, m); err != nil {
		t.Fatal(err)
	}
	revoked, err := m.Remove(alice, carol.ID())
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, second(Open(bob, fromCarol, revoked)), ErrUnknownSender)
	fromMallory := mustSeal(t, mallory, bob.Public(), mustMessage(t, KindSync, "home", []byte("hi")))
	wantErr(t, second(Open(bob, fromMallory, m)), ErrUnknownSender)
	wantErr(t, second(Open(bob, fromCarol, nil)), ErrUnknownSender)
	// A message for another group is checked against that group, which
	// the manifest of "home" does not answer for.
	other := mustSeal(t, carol, bob.Public(), mustMessage(t, KindSync, "work", []byte("hi")))
	wantErr(t, second(Open(bob, other, m)), ErrUnknownSender)
	// A lookup that answers with a key that is not the sender's.
	liar := SendersFunc(func(string, DeviceID) (Public, bool) { return alice.Public(), true })
	wantErr(t, second(Open(bob, fromCarol, liar)), ErrUnknownSender)
	// Several groups through one lookup.
	both := SendersFunc(func(g string, id DeviceID) (Public, bool) {
		if g == "work" {
			return group(t, "work", carol, bob).SenderKey(g, id)
		}
		return m.SenderKey(g, id)
	})
	for _, b := range [][]byte{fromCarol, other} {
		if _, err := Open(bob, b, both); err != nil {
			t.Fatal(err)
		}
	}
}

// Open's unknown-sender error names the message it could not check: its
// kind, id, sender, group and, for a membership message, the epoch of the
// manifest it carries, so a recipient can keep it until it knows the
// signer.
func TestUnknownSenderErrorNamesTheMessage(t *testing.T) {
	alice, bob, carol, dave := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 3), fixedIdentity(t, 4)
	held := group(t, "home", alice, bob)
	withCarol, err := held.Add(alice, carol.Public(), "carol") // bob has not seen this one
	if err != nil {
		t.Fatal(err)
	}
	withDave, err := withCarol.Add(carol, dave.Public(), "dave")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind  Kind
		body  []byte
		epoch uint64
	}{
		{KindGroupManifest, withDave.Bytes(), withDave.Epoch()},
		{KindRevoke, withDave.Bytes(), withDave.Epoch()},
		{KindGroupManifest, []byte("not a manifest"), 0},
		{KindSync, withDave.Bytes(), 0},
	} {
		msg := mustMessage(t, tc.kind, "home", tc.body)
		_, err := Open(bob, mustSeal(t, carol, bob.Public(), msg), held)
		var us *UnknownSenderError
		if !errors.As(err, &us) || !errors.Is(err, ErrUnknownSender) {
			t.Fatalf("%v: %v", tc.kind, err)
		}
		want := UnknownSenderError{Kind: tc.kind, ID: msg.ID, Sender: carol.ID(), Group: "home", Epoch: tc.epoch}
		if *us != want {
			t.Fatalf("%v: %+v, want %+v", tc.kind, *us, want)
		}
	}
	if _, err := Open(bob, mustSeal(t, carol, bob.Public(), mustMessage(t, KindGroupManifest, "home", withDave.Bytes())), withCarol); err != nil {
		t.Fatalf("once the signer is known: %v", err)
	}
}

// A message whose signature is not its named sender's: made with the
// package's own encoder, so only the signature is wrong.
func TestForgedSignature(t *testing.T) {
	alice, bob, mallory := fixedIdentity(t, 1), fixedIdentity(t, 2), fixedIdentity(t, 4)
	m := group(t, "home", alice, bob)
	msg := mustMessage(t, KindSync, "home", []byte("pay mallory"))
	msg.Sender = alice.ID()
	hdr := makeHeader(Version, bob.ID())
	blob, err := sealInner(bob.Public(), hdr[:], signInner(mallory, hdr[:], &msg))
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, second(Open(bob, blob, m)), ErrBadSignature)

	// A message signed for carol, re-sealed by its recipient to bob: the
	// signature covers the recipient in the header, so bob refuses it.
	carol := fixedIdentity(t, 3)
	m3 := group(t, "home", alice, bob, carol)
	carolHdr := makeHeader(Version, carol.ID())
	inner := signInner(alice, carolHdr[:], &msg)
	forwarded, err := sealInner(bob.Public(), hdr[:], inner)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, second(Open(bob, forwarded, m3)), ErrBadSignature)

	// Inner bytes that do not decode, in a good seal.
	junk, err := sealInner(bob.Public(), hdr[:], make([]byte, 200))
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, second(Open(bob, junk, m)), ErrMalformed)
}

// The same message sealed twice (a retry) keeps its id, timestamp and
// signed bytes; two sends of the same body are two messages.
func TestResealKeepsIDAndTimestamp(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	m := group(t, "home", alice, bob)
	msg := mustMessage(t, KindSync, "home", []byte("same bytes"))
	b1 := mustSeal(t, alice, bob.Public(), msg)
	b2 := mustSeal(t, alice, bob.Public(), msg)
	if bytes.Equal(b1, b2) || bytes.Equal(b1[HeaderSize:HeaderSize+kemEncSize], b2[HeaderSize:HeaderSize+kemEncSize]) {
		t.Fatal("a re-seal reused the encryption")
	}
	o1, err1 := Open(bob, b1, m)
	o2, err2 := Open(bob, b2, m)
	if err1 != nil || err2 != nil || o1.ID != o2.ID || !o1.Timestamp.Equal(o2.Timestamp) {
		t.Fatalf("re-seal changed the message: %v %v", err1, err2)
	}
	hdr := makeHeader(Version, bob.ID())
	msg.Sender = alice.ID()
	if !bytes.Equal(signInner(alice, hdr[:], &msg), signInner(alice, hdr[:], &msg)) {
		t.Fatal("signing the same message twice gave different inner bytes")
	}

	again := mustMessage(t, KindSync, "home", []byte("same bytes"))
	if again.ID == msg.ID {
		t.Fatal("two sends of identical bytes share a message id")
	}
	o3, err := Open(bob, mustSeal(t, alice, bob.Public(), again), m)
	if err != nil || o3.ID == o1.ID || !bytes.Equal(o3.Body, o1.Body) {
		t.Fatalf("second send: %v", err)
	}
}

func TestSealRefusesIncompleteMessages(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	good := mustMessage(t, KindSync, "home", []byte("x"))
	cases := map[string]func(*Inner){
		"unknown kind":    func(m *Inner) { m.Kind = 9 },
		"kind 0":          func(m *Inner) { m.Kind = 0 },
		"no id":           func(m *Inner) { m.ID = MessageID{} },
		"no timestamp":    func(m *Inner) { m.Timestamp = time.Time{} },
		"1970":            func(m *Inner) { m.Timestamp = time.UnixMilli(0) },
		"bad group":       func(m *Inner) { m.Group = "no spaces" },
		"another sender":  func(m *Inner) { m.Sender = bob.ID() },
		"group too long":  func(m *Inner) { m.Group = strings.Repeat("g", MaxGroupNameLen+1) },
		"no group at all": func(m *Inner) { m.Group = "" },
	}
	for name, change := range cases {
		msg := good
		change(&msg)
		if _, err := Seal(alice, bob.Public(), msg); err == nil {
			t.Errorf("%s: sealed", name)
		}
	}
	if _, err := Seal(alice, Public{}, good); err == nil {
		t.Error("sealed to no one")
	}
	if _, err := NewMessage(KindSync, "home", nil, time.Unix(0, 0)); err == nil {
		t.Error("NewMessage stamped 1970")
	}
}

func TestKindsAndIDs(t *testing.T) {
	for k, want := range map[Kind]string{KindSync: "sync", KindPair: "pair", KindGroupManifest: "group-manifest",
		KindLeave: "leave", KindRevoke: "revoke", 0: "kind(0)", 6: "kind(6)"} {
		if k.String() != want {
			t.Errorf("Kind(%d) = %q", k, k.String())
		}
		if k.Control() != (k >= KindPair && k <= KindRevoke) {
			t.Errorf("Kind(%d).Control", k)
		}
	}
	id := MessageID{0: 0xab, 15: 0x01}
	if id.String() != "ab000000000000000000000000000001" || id.IsZero() || !(MessageID{}).IsZero() {
		t.Fatal(id.String())
	}
}

// CheckHeader refuses what no sealing writes, at and past each edge, and
// takes a real blob and a later version's of any size.
func TestCheckHeaderRefusesImpossibleHeaders(t *testing.T) {
	id, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(v uint16, to DeviceID, size int) []byte {
		h := makeHeader(v, to)
		return append(h[:], make([]byte, size-HeaderSize)...)
	}
	to := id.ID()
	for _, tc := range []struct {
		name string
		blob []byte
		ok   bool
	}{
		{"smallest", hdr(Version, to, MinSealedSize), true},
		{"one byte short", hdr(Version, to, MinSealedSize-1), false},
		{"largest", hdr(Version, to, MaxSealedSize), true},
		{"one byte over", hdr(Version, to, MaxSealedSize+1), false},
		{"version 0", hdr(0, to, MinSealedSize), false},
		{"a later version, any size", hdr(Version+1, to, HeaderSize+1), true},
		{"the furthest version ahead", hdr(Version+maxVersionsAhead, to, MinSealedSize), true},
		{"past it", hdr(Version+maxVersionsAhead+1, to, MinSealedSize), false},
		{"the all-zero recipient", hdr(Version, DeviceID{}, MinSealedSize), false},
		{"no header", []byte("BBSL"), false},
	} {
		err := CheckHeader(tc.blob)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ok %v (or ErrMalformed)", tc.name, err, tc.ok)
		}
	}
}
