package seal

// Shared fixtures: identities from fixed seeds (so failures reproduce),
// groups built from them, and error checks.

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// fixedIdentity derives an identity from one byte, for reproducible tests.
func fixedIdentity(t testing.TB, n byte) *Identity {
	t.Helper()
	id, err := newIdentity(bytes.Repeat([]byte{n}, 32), bytes.Repeat([]byte{n ^ 0x5a}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// testNow is the clock of every test that does not read a real one.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)

// group makes a group created by ids[0] holding all of ids, each added by
// the creator.
func group(t testing.TB, name string, ids ...*Identity) *Manifest {
	t.Helper()
	m, err := NewGroup(ids[0], name, "device 0")
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids[1:] {
		if m, err = m.Add(ids[0], id.Public(), "device "+string(rune('1'+i))); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func mustMessage(t testing.TB, kind Kind, group string, body []byte) Inner {
	t.Helper()
	m, err := NewMessage(kind, group, body, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustSeal(t testing.TB, author *Identity, to Public, msg Inner) []byte {
	t.Helper()
	b, err := Seal(author, to, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}
