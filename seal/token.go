package seal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Invitation tokens: how long one may live.
const (
	// MinInviteTTL and MaxInviteTTL bound the lifetime given to
	// Manifest.Invite.
	MinInviteTTL = time.Minute
	MaxInviteTTL = 7 * 24 * time.Hour

	// TokenPrefix starts every token's text form.
	TokenPrefix = "busbar-invite:"

	tokenFormat    = 1
	tokenSecretLen = 32
	tokenIDDomain  = "busbar invite id\x00"
	// tokenFixed is a token's binary form without its group name.
	tokenFixed = 1 + tokenSecretLen + 8 + 1 + PublicSize + 4
)

// A Token invites one device into a group. A member makes it
// (Manifest.Invite) and shows its text form; the new device parses it
// (ParseToken) and answers with a Pair message (Token.PairMessage) sealed
// to the inviter; the inviter, who kept the token, checks the answer
// (Token.VerifyPair) and accepts one join per token.
//
// It holds a one-time secret of 256 bits, the expiry (whole seconds), the
// group name and the inviter's Public, from which the inviter's device id
// follows. Binary form, then lower-case base32 after TokenPrefix (about
// 2,100 characters: the inviter's ML-KEM key alone is 1,184 bytes):
//
//	format 1 (1) | secret (32) | expiry, Unix seconds, int64 BE (8)
//	| group length (1) | group | inviter Public (1249) | checksum (4)
//
// The checksum is the first 4 bytes of SHA-256 over what precedes it, so
// a token damaged in copying is reported as such. Anyone holding the text
// can join while it is valid: pass it only to the device that is to join.
type Token struct {
	secret  [tokenSecretLen]byte
	expires time.Time
	group   string
	inviter Public
}

// A TokenID names a token without revealing its secret, so the inviter can
// file its tokens by it, log it, and find the one a Pair answers: the
// first 16 bytes of SHA-256("busbar invite id\x00" || secret).
type TokenID [16]byte

// String returns the id as 32 hex digits.
func (t TokenID) String() string { return hex.EncodeToString(t[:]) }

// Invite makes a token for joining m's group, valid for ttl
// (MinInviteTTL to MaxInviteTTL) from now, the expiry rounded down to the
// second. The inviter must be a member, and the group must have room for
// one more.
func (m *Manifest) Invite(inviter *Identity, ttl time.Duration, now time.Time) (*Token, error) {
	if ttl < MinInviteTTL || ttl > MaxInviteTTL {
		return nil, fmt.Errorf("seal: invitation lifetime %v, want %v to %v", ttl, MinInviteTTL, MaxInviteTTL)
	}
	if !m.Has(inviter.ID()) {
		return nil, fmt.Errorf("%w: inviter %s of group %q", ErrNotMember, inviter.ID(), m.name)
	}
	if len(m.members) >= MaxGroupMembers {
		return nil, fmt.Errorf("%w: group %q is full (%d)", ErrTooManyMembers, m.name, MaxGroupMembers)
	}
	t := &Token{expires: time.Unix(now.Add(ttl).Unix(), 0), group: m.name, inviter: inviter.Public()}
	rand.Read(t.secret[:]) // never fails (crypto/rand)
	return t, nil
}

// Group returns the group the token invites into.
func (t *Token) Group() string { return t.group }

// Inviter returns the inviter's keys: seal the Pair message to them.
func (t *Token) Inviter() Public { return t.inviter }

// Expires returns the expiry: the token is valid before it, not at it.
func (t *Token) Expires() time.Time { return t.expires }

// Expired reports whether the token is expired at now.
func (t *Token) Expired(now time.Time) bool { return !now.Before(t.expires) }

// ID returns the token's id.
func (t *Token) ID() TokenID {
	h := sha256.Sum256(append([]byte(tokenIDDomain), t.secret[:]...))
	return TokenID(h[:16])
}

// SenderKey implements Senders for a device that joined with t and holds
// no manifest yet: the inviter, in the token's group, is the only sender
// it knows.
func (t *Token) SenderKey(group string, id DeviceID) (Public, bool) {
	if group != t.group || id != t.inviter.ID() {
		return Public{}, false
	}
	return t.inviter, true
}

// String describes the token without its secret; use Text for the form
// to paste.
func (t *Token) String() string {
	return fmt.Sprintf("invitation %s to group %q from %s, expires %s",
		t.ID(), t.group, t.inviter.ID(), t.expires.UTC().Format(time.RFC3339))
}

// Text returns the form to show and paste: TokenPrefix and base32. It
// holds the secret.
func (t *Token) Text() string {
	b := make([]byte, 0, tokenFixed+len(t.group))
	b = append(b, tokenFormat)
	b = append(b, t.secret[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(t.expires.Unix()))
	b = putShort(b, t.group)
	b = append(b, t.inviter.raw...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:4]...)
	return TokenPrefix + b32.EncodeToString(b)
}

// ParseToken reads a token's text form. Spaces, tabs and line breaks
// anywhere are dropped first (a pasted token may be wrapped); the rest
// must be TokenPrefix and the canonical lower-case base32 of a
// well-formed token with a correct checksum (ErrBadToken). It does not
// check the expiry: see Expired.
func ParseToken(s string) (*Token, error) {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
			return -1
		}
		return r
	}, s)
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: it must start with %q", ErrBadToken, TokenPrefix)
	}
	b, ok := decodeB32(rest)
	if !ok {
		return nil, fmt.Errorf("%w: not lower-case base32 after %q (damaged in copying?)", ErrBadToken, TokenPrefix)
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: too short", ErrBadToken)
	}
	if sum := sha256.Sum256(b[:len(b)-4]); !bytes.Equal(sum[:4], b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum does not match (damaged in copying?)", ErrBadToken)
	}
	r := reader{b: b[:len(b)-4], what: "invitation token"}
	if f := r.u8("format"); r.err == nil && f != tokenFormat {
		r.fail(fmt.Errorf("%w: format %d, this build reads %d", ErrBadToken, f, tokenFormat))
	}
	t := &Token{}
	copy(t.secret[:], r.take(tokenSecretLen, "secret"))
	exp := int64(r.u64("expiry"))
	t.group = string(r.short(MaxGroupNameLen, "group"))
	raw := r.take(PublicSize, "inviter key")
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	if exp <= 0 {
		return nil, fmt.Errorf("%w: expiry %d before 1970", ErrBadToken, exp)
	}
	if !ValidGroupName(t.group) {
		return nil, fmt.Errorf("%w: invalid group name %q", ErrBadToken, clip(t.group))
	}
	p, err := ParsePublic(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	t.expires, t.inviter = time.Unix(exp, 0), p
	return t, nil
}
