package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// MoonBridgeKey is a principal's key for MoonBridge backends (package
// moonbridge): a backend signs its registration with HMAC-SHA256 keyed by
// Secret's UTF-8 bytes and names the key by KeyID. Unlike a busbar secret
// the broker must keep Secret itself, not a hash, to check an HMAC: the
// principals file is owner-only for that reason too.
type MoonBridgeKey struct {
	KeyID  string `json:"key_id"` // 1..MaxMoonBridgeKeyID bytes of [A-Za-z0-9._-]
	Secret string `json:"secret"` // MinMoonBridgeSecret..MaxMoonBridgeSecret bytes of UTF-8
}

// Limits of a MoonBridge key: MoonBridge's own (its proxy reads a key id
// of at most 64 bytes; its client refuses a secret under 32 bytes).
const (
	MaxMoonBridgeKeyID  = 64
	MinMoonBridgeSecret = 32
	MaxMoonBridgeSecret = 1024
)

// ErrBadMoonBridgeKey: a MoonBridge key id or secret breaks its rules.
var ErrBadMoonBridgeKey = errors.New("auth: invalid MoonBridge key")

func (k *MoonBridgeKey) check() error {
	if n := len(k.KeyID); n == 0 || n > MaxMoonBridgeKeyID {
		return fmt.Errorf("%w: key_id must be 1..%d bytes", ErrBadMoonBridgeKey, MaxMoonBridgeKeyID)
	}
	for i := 0; i < len(k.KeyID); i++ {
		c := k.KeyID[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: key_id byte %d is not [A-Za-z0-9._-]", ErrBadMoonBridgeKey, i)
		}
	}
	if n := len(k.Secret); n < MinMoonBridgeSecret || n > MaxMoonBridgeSecret || !utf8.ValidString(k.Secret) {
		return fmt.Errorf("%w: secret must be %d..%d bytes of UTF-8", ErrBadMoonBridgeKey, MinMoonBridgeSecret, MaxMoonBridgeSecret)
	}
	return nil
}

// NewMoonBridgeKey returns a key named keyID with a fresh secret: 32
// random bytes, base64url without padding (43 bytes of text).
func NewMoonBridgeKey(keyID string) (MoonBridgeKey, error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return MoonBridgeKey{}, err
	}
	k := MoonBridgeKey{KeyID: keyID, Secret: base64.RawURLEncoding.EncodeToString(b[:])}
	return k, k.check()
}

// MayClaim reports whether p's node patterns let it be node.
func (p *Principal) MayClaim(node string) bool {
	if ValidNodeName(node) != nil {
		return false
	}
	return slices.ContainsFunc(p.Nodes, func(n Pattern) bool { return matchNode(n, node) })
}

// MoonBridgeKey returns the principal whose MoonBridge key is keyID, and
// the key's secret; ok is false for an unknown key id.
func (s *Store) MoonBridgeKey(keyID string) (p *Principal, secret []byte, ok bool) {
	t := s.cur.Load()
	if t == nil {
		return nil, nil, false
	}
	e := t.byKeyID[keyID]
	if e == nil {
		return nil, nil, false
	}
	c := e.p.clone()
	return &c, []byte(e.p.MoonBridge.Secret), true
}

// AddMoonBridgePrincipal adds p to the principals file at path, as
// AddPrincipal does, with a new MoonBridge key whose id is p's name
// instead of a busbar secret, and returns the key.
func AddMoonBridgePrincipal(path string, p Principal) (MoonBridgeKey, error) {
	k, err := NewMoonBridgeKey(p.Name)
	if err != nil {
		return MoonBridgeKey{}, fmt.Errorf("%w %q: %v", ErrBadPrincipal, p.Name, err)
	}
	p.MoonBridge = &k
	if err := addEntry(path, p); err != nil {
		return MoonBridgeKey{}, err
	}
	return k, nil
}
