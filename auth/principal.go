package auth

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Principal is an identity a connection authenticates as: its name, how it
// proves itself (exactly one of SecretHash and PublicKey), which node names
// it may claim and what it may do on which channels and state namespaces.
type Principal struct {
	Name       string `json:"name"`                  // 1..64 bytes of [a-z0-9-_.]
	SecretHash string `json:"secret_hash,omitempty"` // "sha256:" + lowercase hex; see HashSecret
	PublicKey  string `json:"public_key,omitempty"`  // "ed25519:" + base64 std of the 32-byte key
	// MoonBridge is a key for MoonBridge backends (package moonbridge),
	// the third kind of proof; such a principal connects only through
	// `busbar serve --moonbridge`.
	MoonBridge  *MoonBridgeKey `json:"moonbridge,omitempty"`
	Nodes       []Pattern      `json:"nodes"` // node patterns; see validNodePattern
	Permissions Permissions    `json:"permissions"`
}

// Credential is what a client presents: a secret for SecretHash principals,
// or an ed25519 signature over SignedMessage(nonce, node) for PublicKey ones.
type Credential struct {
	Principal string `json:"principal"`
	Secret    string `json:"secret,omitempty"`
	Signature []byte `json:"signature,omitempty"`
}

const maxPrincipalLen = 64

func principalByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

func validPrincipalName(s string) error {
	if s == "" || len(s) > maxPrincipalLen {
		return errors.New("must be 1..64 bytes")
	}
	for i := 0; i < len(s); i++ {
		if !principalByte(s[i]) {
			return fmt.Errorf("invalid byte at %d (want [a-z0-9-_.])", i)
		}
	}
	return nil
}

// entry is a validated principal with its proof material decoded once at
// load, so Authenticate does no parsing.
type entry struct {
	p      Principal
	hash   [32]byte
	hasKey bool
	pub    ed25519.PublicKey
}

// newEntry validates p (a deep copy is kept); errors name the field.
func newEntry(p Principal) (*entry, error) {
	if err := validPrincipalName(p.Name); err != nil {
		return nil, fmt.Errorf("field name: %w", err)
	}
	e := &entry{p: p.clone()}
	proofs := 0
	for _, set := range []bool{p.SecretHash != "", p.PublicKey != "", p.MoonBridge != nil} {
		if set {
			proofs++
		}
	}
	switch {
	case proofs > 1:
		return nil, errors.New("fields secret_hash, public_key and moonbridge: set exactly one, not several")
	case proofs == 0:
		return nil, errors.New("fields secret_hash, public_key and moonbridge: set exactly one")
	case p.MoonBridge != nil:
		if err := p.MoonBridge.check(); err != nil {
			return nil, fmt.Errorf("field moonbridge: %w", err)
		}
	case p.SecretHash != "":
		h, ok := strings.CutPrefix(p.SecretHash, secretHashPrefix)
		if !ok || len(h) != 64 || strings.ToLower(h) != h {
			return nil, errors.New(`field secret_hash: want "sha256:" + 64 lowercase hex digits`)
		}
		if _, err := hex.Decode(e.hash[:], []byte(h)); err != nil {
			return nil, fmt.Errorf("field secret_hash: %v", err)
		}
	default:
		k, ok := strings.CutPrefix(p.PublicKey, publicKeyPrefix)
		raw, err := base64.StdEncoding.Strict().DecodeString(k)
		if !ok || err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, errors.New(`field public_key: want "ed25519:" + standard base64 of 32 bytes`)
		}
		e.hasKey, e.pub = true, ed25519.PublicKey(raw)
	}
	for i, n := range p.Nodes {
		if err := validNodePattern(n); err != nil {
			return nil, fmt.Errorf("field nodes[%d]: %w", i, err)
		}
	}
	perms := []struct {
		field string
		list  []Pattern
	}{
		{"send", p.Permissions.Send},
		{"request", p.Permissions.Request},
		{"publish", p.Permissions.Publish},
		{"subscribe", p.Permissions.Subscribe},
		{"handle", p.Permissions.Handle},
		{"tap", p.Permissions.Tap},
		{"state_read", p.Permissions.StateRead},
		{"state_write", p.Permissions.StateWrite},
		{"state_admin", p.Permissions.StateAdmin},
	}
	for _, f := range perms {
		for i, pat := range f.list {
			if _, err := ParsePattern(string(pat)); err != nil {
				return nil, fmt.Errorf("field permissions.%s[%d]: %w", f.field, i, err)
			}
		}
	}
	return e, nil
}

// mayUseNode reports whether any of the principal's node patterns matches.
func (e *entry) mayUseNode(node string) bool {
	for _, n := range e.p.Nodes {
		if matchNode(n, node) {
			return true
		}
	}
	return false
}

func (p Principal) clone() Principal {
	c := p
	c.Nodes = clonePatterns(p.Nodes)
	c.Permissions = p.Permissions.clone()
	if p.MoonBridge != nil {
		k := *p.MoonBridge
		c.MoonBridge = &k
	}
	return c
}
