package seal

// Fuzz targets for every decoder: the blob (header and Open), the inner
// message, the manifest, the token, the Pair body, the public key (binary
// and JSON) and the key file. Each checks that nothing panics, that every
// refusal is a documented error, and that whatever a strict decoder
// accepts encodes back to exactly the input (so no two encodings mean the
// same thing). The seeds are valid values and pieces of them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// fuzzGroup is the fixed cast of the fuzz targets.
func fuzzGroup(t testing.TB) (alice, bob *Identity, m *Manifest) {
	alice, bob = fixedIdentity(t, 1), fixedIdentity(t, 2)
	return alice, bob, group(t, "home", alice, bob)
}

func FuzzBlob(f *testing.F) {
	alice, bob, m := fuzzGroup(f)
	blob := mustSeal(f, alice, bob.Public(), mustMessage(f, KindSync, "home", []byte("hello")))
	f.Add(blob)
	f.Add(blob[:HeaderSize])
	f.Add(blob[:MinSealedSize])
	f.Add([]byte("BBSL\x00\x02"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, verr := PeekVersion(b)
		to, rerr := PeekRecipient(b)
		if (verr == nil) != (len(b) >= 6 && string(b[:4]) == blobMagic) {
			t.Fatalf("PeekVersion: %v", verr)
		}
		if (rerr == nil) != (verr == nil && len(b) >= HeaderSize) {
			t.Fatalf("PeekRecipient: %v", rerr)
		}
		msg, err := Open(bob, b, m)
		if err == nil {
			if v != Version || to != bob.ID() || msg.Kind != KindPair && !m.Has(msg.Sender) {
				t.Fatalf("opened a blob of version %d for %s from %s", v, to, msg.Sender)
			}
			return
		}
		var newer ErrVersionNewer
		var older ErrVersionOlder
		known := errors.As(err, &newer) || errors.As(err, &older)
		for _, e := range []error{ErrMalformed, ErrNotForMe, ErrBadSeal, ErrUnknownSender, ErrBadSignature} {
			known = known || errors.Is(err, e)
		}
		if !known {
			t.Fatalf("undocumented error: %v", err)
		}
	})
}

func FuzzInner(f *testing.F) {
	alice, bob, _ := fuzzGroup(f)
	hdr := makeHeader(Version, bob.ID())
	for _, body := range [][]byte{nil, []byte("hello"), bytes.Repeat([]byte{0xff}, 300)} {
		msg := mustMessage(f, KindSync, "home", body)
		msg.Sender = alice.ID()
		f.Add(signInner(alice, hdr[:], &msg))
	}
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, sig, err := decodeInner(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		again := signInner(alice, hdr[:], &msg)
		if n := len(b) - len(sig); !bytes.Equal(again[:len(again)-len(sig)], b[:n]) {
			t.Fatalf("accepted a non-canonical inner message:\n% x\nre-encodes as\n% x", b, again)
		}
	})
}

func FuzzManifest(f *testing.F) {
	alice, _, m := fuzzGroup(f)
	f.Add(m.Bytes())
	one, _ := NewGroup(alice, "g", "")
	f.Add(one.Bytes())
	f.Add(m.Bytes()[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if !bytes.Equal(p.Bytes(), b) {
			t.Fatal("Bytes is not the input")
		}
		// Re-encoding the decoded fields gives the input up to the
		// signature: the encoding is canonical.
		if body := p.appendBody(nil); !bytes.Equal(body, b[:len(b)-64]) {
			t.Fatalf("accepted a non-canonical manifest")
		}
		p.Verify(nil) // must not panic, whatever it decides
		p.Verify(m)
		p.Diff(m)
	})
}

func FuzzToken(f *testing.F) {
	tok, _, _ := newToken(f)
	f.Add(tok.Text())
	f.Add(tok.Text()[:200])
	f.Add(TokenPrefix)
	f.Add(" busbar-invite:aaaa\n")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrBadToken) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		stripped := strings.Join(strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(" \t\r\n", r) }), "")
		if p.Text() != stripped {
			t.Fatalf("accepted a non-canonical token")
		}
	})
}

func FuzzPair(f *testing.F) {
	tok, _, _ := newToken(f)
	msg, err := tok.PairMessage(fixedIdentity(f, 2), "phone", testNow)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg.Body)
	f.Add(msg.Body[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePair(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if !bytes.Equal(p.bytes(), b) {
			t.Fatal("accepted a non-canonical pair")
		}
		in := msg
		in.Body = b
		tok.VerifyPair(in, testNow) // must not panic
	})
}

func FuzzPublic(f *testing.F) {
	p := fixedIdentity(f, 1).Public()
	f.Add(p.Bytes())
	f.Add(p.Bytes()[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := ParsePublic(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if !bytes.Equal(q.Bytes(), b) {
			t.Fatal("accepted a non-canonical public key")
		}
	})
}

func FuzzPublicJSON(f *testing.F) {
	j, _ := json.Marshal(fixedIdentity(f, 1).Public())
	f.Add(j)
	f.Add([]byte(`{"id":"","sign":"ed25519:","seal":"mlkem768x25519:"}`))
	f.Fuzz(func(t *testing.T, j []byte) {
		var q Public
		if err := json.Unmarshal(j, &q); err != nil {
			return
		}
		again, err := json.Marshal(q)
		var r Public
		if err != nil || json.Unmarshal(again, &r) != nil || !r.Equal(q) {
			t.Fatalf("JSON round trip of an accepted key: %v", err)
		}
	})
}

func FuzzKeyFile(f *testing.F) {
	f.Add(fixedIdentity(f, 1).keyFileBytes())
	f.Add([]byte("BBDK\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := parseKeyFile("device.key", b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		if !bytes.Equal(id.keyFileBytes(), b) {
			t.Fatal("accepted a non-canonical key file")
		}
	})
}
