package seal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hpke"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// suite1 is the only cipher suite: Ed25519 signatures, HPKE with the
// MLKEM768-X25519 KEM (X-Wing), HKDF-SHA256 and ChaCha20-Poly1305.
const suite1 byte = 1

// The HPKE suite. MLKEM768-X25519 is hybrid: a blob stays sealed unless
// both ML-KEM-768 and X25519 are broken.
var (
	kem  = hpke.MLKEM768X25519()
	kdf  = hpke.HKDFSHA256()
	aead = hpke.ChaCha20Poly1305()
)

// Public is the public half of a device identity: the Ed25519 key that
// verifies what the device signs and the HPKE key that others seal to. It
// is immutable and safe to share; the zero Public names no device.
//
// Binary form (PublicSize = 1249 bytes):
//
//	suite (1, = 1) | Ed25519 public key (32) | MLKEM768-X25519 public key (1216)
//
// JSON form, with the id for people to read (checked on decoding):
//
//	{"id":"<device id>","sign":"ed25519:<base64>","seal":"mlkem768x25519:<base64>"}
type Public struct {
	raw  string // the binary form
	sign ed25519.PublicKey
	kem  hpke.PublicKey
	id   DeviceID
}

// ParsePublic decodes a Public's binary form, checking both keys.
func ParsePublic(b []byte) (Public, error) {
	if len(b) != PublicSize {
		return Public{}, malformed("public key: %d bytes, want %d", len(b), PublicSize)
	}
	if b[0] != suite1 {
		return Public{}, malformed("public key: unknown suite %d", b[0])
	}
	sign := b[1 : 1+ed25519.PublicKeySize]
	k, err := kem.NewPublicKey(b[1+ed25519.PublicKeySize:])
	if err != nil {
		return Public{}, malformed("public key: sealing key: %v", err)
	}
	return newPublic(sign, k), nil
}

func newPublic(sign []byte, k hpke.PublicKey) Public {
	raw := make([]byte, 0, PublicSize)
	raw = append(raw, suite1)
	raw = append(raw, sign...)
	raw = append(raw, k.Bytes()...)
	return Public{
		raw:  string(raw),
		sign: ed25519.PublicKey(raw[1 : 1+ed25519.PublicKeySize : 1+ed25519.PublicKeySize]),
		kem:  k,
		id:   deriveDeviceID(raw),
	}
}

// Bytes returns the binary form.
func (p Public) Bytes() []byte { return []byte(p.raw) }

// ID returns the device id derived from the keys.
func (p Public) ID() DeviceID { return p.id }

// SigningKey returns a copy of the Ed25519 public key.
func (p Public) SigningKey() ed25519.PublicKey { return bytes.Clone(p.sign) }

// IsZero reports whether p is the zero Public.
func (p Public) IsZero() bool { return p.raw == "" }

// Equal reports whether p and q are the same keys.
func (p Public) Equal(q Public) bool { return p.raw == q.raw }

// String returns the device id.
func (p Public) String() string { return p.id.String() }

type publicJSON struct {
	ID   DeviceID `json:"id"`
	Sign string   `json:"sign"`
	Seal string   `json:"seal"`
}

const (
	signPrefix = "ed25519:"
	sealPrefix = "mlkem768x25519:"
)

// MarshalJSON implements json.Marshaler.
func (p Public) MarshalJSON() ([]byte, error) {
	if p.IsZero() {
		return nil, fmt.Errorf("seal: cannot encode the zero Public")
	}
	return json.Marshal(publicJSON{
		ID:   p.id,
		Sign: signPrefix + base64.StdEncoding.EncodeToString(p.sign),
		Seal: sealPrefix + base64.StdEncoding.EncodeToString(p.kem.Bytes()),
	})
}

// UnmarshalJSON implements json.Unmarshaler. Unknown fields, a missing
// field, a wrong prefix or an id that does not match the keys are errors.
func (p *Public) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j publicJSON
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: public key: %v", ErrMalformed, err)
	}
	sign, err := decodeKey(j.Sign, signPrefix, ed25519.PublicKeySize)
	if err != nil {
		return err
	}
	seal, err := decodeKey(j.Seal, sealPrefix, kemPublicSize)
	if err != nil {
		return err
	}
	v, err := ParsePublic(append(append([]byte{suite1}, sign...), seal...))
	if err != nil {
		return err
	}
	if v.id != j.ID {
		return malformed("public key: id %s does not match the keys (%s)", j.ID, v.id)
	}
	*p = v
	return nil
}

func decodeKey(s, prefix string, size int) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil, malformed("public key: %q does not start with %q", clip(s), prefix)
	}
	k, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil || len(k) != size {
		return nil, malformed("public key: %s key is not %d bytes of base64", strings.TrimSuffix(prefix, ":"), size)
	}
	return k, nil
}
