package seal

// Costs of sealing and opening one message, small and at the payload
// limit: go test ./seal -run '^$' -bench . -benchmem

import (
	"fmt"
	"testing"
)

var benchSizes = []int{1024, MaxPayloadBytes}

func BenchmarkSeal(b *testing.B) {
	alice, bob := fixedIdentity(b, 1), fixedIdentity(b, 2)
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("body=%d", n), func(b *testing.B) {
			msg := mustMessage(b, KindSync, "home", make([]byte, n))
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Seal(alice, bob.Public(), msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	alice, bob := fixedIdentity(b, 1), fixedIdentity(b, 2)
	m := group(b, "home", alice, bob)
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("body=%d", n), func(b *testing.B) {
			blob := mustSeal(b, alice, bob.Public(), mustMessage(b, KindSync, "home", make([]byte, n)))
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Open(bob, blob, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkManifest is the cost of checking the largest manifest against
// its predecessor, and of decoding it (32 public keys).
func BenchmarkManifest(b *testing.B) {
	ids := identities(b, MaxGroupMembers)
	members := make([]Member, len(ids))
	for i, id := range ids {
		members[i] = Member{Public: id.Public()}
	}
	m1, _ := NewGroup(ids[0], "home", "")
	full, err := m1.Next(ids[0], members)
	if err != nil {
		b.Fatal(err)
	}
	raw := full.Bytes()
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseManifest(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := full.Verify(m1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
