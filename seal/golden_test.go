package seal

// The format, frozen: a blob sealed by an earlier build (testdata/
// golden_blob.hex) must keep opening, and the signed inner message of a
// fixed message from fixed keys must keep its exact bytes
// (testdata/golden_inner.hex). docs/durable.md quotes both. Rewrite them
// with: go test ./seal -run Golden -update (only for a new format version).

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenMessage is the example of docs/durable.md: alice (fixedIdentity 1)
// says "hello, bob" to bob (fixedIdentity 2) in group "home".
func goldenMessage(t *testing.T) (alice, bob *Identity, msg Inner) {
	alice, bob = fixedIdentity(t, 1), fixedIdentity(t, 2)
	msg = Inner{
		Kind:      KindSync,
		ID:        MessageID{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f},
		Sender:    alice.ID(),
		Group:     "home",
		Timestamp: testNow,
		Body:      []byte("hello, bob"),
	}
	return alice, bob, msg
}

func hexLines(b []byte) string {
	var s strings.Builder
	for i := 0; i < len(b); i += 32 {
		s.WriteString(hex.EncodeToString(b[i:min(i+32, len(b))]) + "\n")
	}
	return s.String()
}

func golden(t *testing.T, name string, fresh []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(hexLines(fresh)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenInner(t *testing.T) {
	alice, bob, msg := goldenMessage(t)
	hdr := makeHeader(Version, bob.ID())
	fresh := signInner(alice, hdr[:], &msg)
	if want := golden(t, "golden_inner.hex", fresh); !bytes.Equal(fresh, want) {
		t.Fatalf("inner message encoding changed:\n%s\nwant\n%s", hexLines(fresh), hexLines(want))
	}
}

func TestGoldenBlob(t *testing.T) {
	alice, bob, msg := goldenMessage(t)
	var fresh []byte
	if *update {
		fresh = mustSeal(t, alice, bob.Public(), msg)
	}
	blob := golden(t, "golden_blob.hex", fresh)
	hdr := makeHeader(Version, bob.ID())
	if !bytes.Equal(blob[:HeaderSize], hdr[:]) {
		t.Fatalf("golden header % x, want % x", blob[:HeaderSize], hdr)
	}
	got, err := Open(bob, blob, group(t, "home", alice, bob))
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != msg.Kind || got.ID != msg.ID || got.Sender != msg.Sender || got.Group != msg.Group ||
		!got.Timestamp.Equal(msg.Timestamp) || !bytes.Equal(got.Body, msg.Body) {
		t.Fatalf("golden blob opened as %+v", got)
	}
}
