package seal

// Identities, public keys and device ids: derivation, encodings, strict
// decoding, and that printing an identity shows no key.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestGenerateGivesDistinctDevices(t *testing.T) {
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() == b.ID() || a.Public().Equal(b.Public()) {
		t.Fatal("two generated identities are the same device")
	}
	if a.ID() != a.Public().ID() || a.ID().IsZero() {
		t.Fatal("identity id is not its public id")
	}
}

func TestDeviceIDIsHashOfPublicKeys(t *testing.T) {
	id := fixedIdentity(t, 1)
	sum := sha256.Sum256(append([]byte("busbar device id\x00"), id.Public().Bytes()...))
	if d := id.ID(); !bytes.Equal(d[:], sum[:DeviceIDSize]) {
		t.Fatal("device id is not the first 20 bytes of SHA-256 over the domain and the public keys")
	}
	s := id.ID().String()
	if len(s) != 32 || strings.ToLower(s) != s {
		t.Fatalf("device id text %q: want 32 lower-case characters", s)
	}
}

func TestDeviceIDText(t *testing.T) {
	id := fixedIdentity(t, 1).ID()
	s := id.String()
	for _, in := range []string{s, strings.ToUpper(s)} {
		got, err := ParseDeviceID(in)
		if err != nil || got != id {
			t.Fatalf("ParseDeviceID(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", s[:31], s + "a", "1" + s[1:], "0" + s[1:], s[:16] + "\n" + s[17:], s[:31] + "="} {
		if _, err := ParseDeviceID(bad); err == nil {
			t.Errorf("ParseDeviceID(%q) accepted", bad)
		}
	}
	b, err := json.Marshal(map[string]DeviceID{"id": id})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]DeviceID
	if err := json.Unmarshal(b, &back); err != nil || back["id"] != id {
		t.Fatalf("JSON round trip: %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"short"}`), &back); err == nil {
		t.Fatal("JSON with a bad id accepted")
	}
}

func TestPublicBinary(t *testing.T) {
	p := fixedIdentity(t, 1).Public()
	raw := p.Bytes()
	if len(raw) != PublicSize || PublicSize != 1249 {
		t.Fatalf("public key is %d bytes, PublicSize %d", len(raw), PublicSize)
	}
	q, err := ParsePublic(raw)
	if err != nil || !q.Equal(p) || q.ID() != p.ID() {
		t.Fatalf("round trip: %v, %v", q, err)
	}
	if !bytes.Equal(p.SigningKey(), raw[1:33]) {
		t.Fatal("SigningKey is not the Ed25519 part of the encoding")
	}
	bad := map[string][]byte{
		"short":       raw[:PublicSize-1],
		"long":        append(bytes.Clone(raw), 0),
		"suite 2":     append([]byte{2}, raw[1:]...),
		"bad ML-KEM":  append(bytes.Clone(raw[:33]), bytes.Repeat([]byte{0xff}, kemPublicSize)...),
		"empty input": nil,
	}
	for name, b := range bad {
		if _, err := ParsePublic(b); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			wantErr(t, err, ErrMalformed)
		}
	}
	if !(Public{}).IsZero() || p.IsZero() {
		t.Fatal("IsZero")
	}
	if p.String() != p.ID().String() {
		t.Fatal("a Public prints as its device id")
	}
}

func TestPublicJSON(t *testing.T) {
	p := fixedIdentity(t, 1).Public()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"id":"`+p.ID().String()+`"`)) || !bytes.Contains(b, []byte(`"sign":"ed25519:`)) ||
		!bytes.Contains(b, []byte(`"seal":"mlkem768x25519:`)) {
		t.Fatalf("JSON form %s", b)
	}
	var q Public
	if err := json.Unmarshal(b, &q); err != nil || !q.Equal(p) {
		t.Fatalf("round trip: %v", err)
	}
	other := fixedIdentity(t, 2).ID().String()
	bad := []string{
		strings.Replace(string(b), p.ID().String(), other, 1),
		strings.Replace(string(b), `"ed25519:`, `"ed448:`, 1),
		strings.Replace(string(b), `"mlkem768x25519:`, `"x25519:`, 1),
		strings.Replace(string(b), `{`, `{"extra":1,`, 1),
		strings.Replace(string(b), `"ed25519:`, `"ed25519:AAAA`, 1),
		`{"id":"` + p.ID().String() + `"}`,
		`[]`,
	}
	for _, s := range bad {
		var q Public
		if err := json.Unmarshal([]byte(s), &q); err == nil {
			t.Errorf("accepted %.80s", s)
		}
	}
	if _, err := json.Marshal(Public{}); err == nil {
		t.Fatal("the zero Public encoded")
	}
}

func TestIdentityPrintsNoKeys(t *testing.T) {
	id := fixedIdentity(t, 1)
	want := "identity " + id.ID().String()
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(f, id); got != want {
			t.Errorf("%s: %q, want %q", f, got, want)
		}
	}
}

func TestNamesAndLabels(t *testing.T) {
	name64 := strings.Repeat("g", MaxGroupNameLen)
	for name, ok := range map[string]bool{
		"home": true, "a": true, "Home_1.x-y": true, name64: true, name64 + "g": false,
		"": false, "-home": false, ".x": false, "ho me": false, "hé": false,
	} {
		if ValidGroupName(name) != ok {
			t.Errorf("ValidGroupName(%q) = %v", name, !ok)
		}
	}
	label64 := strings.Repeat("é", MaxLabelLen/2)
	for label, ok := range map[string]bool{
		"": true, "kitchen laptop": true, label64: true, label64 + "x": false,
		"tab\there": false, "nl\n": false, "\xff": false,
	} {
		if ValidLabel(label) != ok {
			t.Errorf("ValidLabel(%q) = %v", label, !ok)
		}
	}
}
