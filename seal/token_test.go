package seal

// Invitation tokens: the text form and its strict parsing, expiry at and
// past its edge, the lifetime limits, and that printing one hides the
// secret.

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func newToken(t testing.TB) (*Token, *Identity, *Manifest) {
	t.Helper()
	alice := fixedIdentity(t, 1)
	m, _ := NewGroup(alice, "home", "laptop")
	tok, err := m.Invite(alice, time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return tok, alice, m
}

func TestTokenText(t *testing.T) {
	tok, alice, _ := newToken(t)
	text := tok.Text()
	if !strings.HasPrefix(text, "busbar-invite:") || strings.ToLower(text) != text {
		t.Fatalf("token text %.40s...", text)
	}
	if n := len(text); n != len(TokenPrefix)+b32.EncodedLen(tokenFixed+len("home")) || n > 2200 {
		t.Fatalf("token text is %d characters", n)
	}
	back, err := ParseToken(text)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID() != tok.ID() || back.Group() != "home" || !back.Expires().Equal(testNow.Add(time.Hour).Truncate(time.Second)) ||
		!back.Inviter().Equal(alice.Public()) || back.Text() != text {
		t.Fatalf("round trip: %v", back)
	}
	// Wrapped when pasted: line breaks and spaces anywhere are dropped.
	var wrapped strings.Builder
	for i := 0; i < len(text); i += 60 {
		wrapped.WriteString("  " + text[i:min(i+60, len(text))] + "\r\n")
	}
	if back, err := ParseToken(wrapped.String()); err != nil || back.ID() != tok.ID() {
		t.Fatalf("wrapped token: %v", err)
	}
}

func TestParseTokenIsStrict(t *testing.T) {
	tok, _, _ := newToken(t)
	text := tok.Text()
	body := text[len(TokenPrefix):]
	other := func(c byte) byte {
		if c == 'a' {
			return 'b'
		}
		return 'a'
	}
	cases := map[string]string{
		"empty":             "",
		"no prefix":         body,
		"other prefix":      "busbar-invitation:" + body,
		"upper case":        strings.ToUpper(text),
		"padding":           text + "=",
		"not base32":        text[:len(text)-3] + "1" + text[len(text)-2:],
		"one changed":       text[:100] + string(other(text[100])) + text[101:],
		"last changed":      text[:len(text)-1] + string(other(text[len(text)-1])),
		"truncated":         text[:len(text)-8],
		"prefix only":       TokenPrefix,
		"four bytes":        TokenPrefix + b32.EncodeToString([]byte{1, 2, 3, 4}),
		"control character": text[:50] + "\x00" + text[50:],
	}
	for name, s := range cases {
		if _, err := ParseToken(s); !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Well-formed text around bad contents: each field out of bounds, with
	// a correct checksum.
	for name, change := range map[string]func(*Token){
		"expiry 0":   func(x *Token) { x.expires = time.Unix(0, 0) },
		"group name": func(x *Token) { x.group = "no spaces" },
	} {
		x := *tok
		change(&x)
		if _, err := ParseToken(x.Text()); !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestTokenExpiry(t *testing.T) {
	tok, _, _ := newToken(t)
	exp := tok.Expires()
	if tok.Expired(exp.Add(-time.Nanosecond)) {
		t.Fatal("expired before its expiry")
	}
	if !tok.Expired(exp) || !tok.Expired(exp.Add(time.Second)) {
		t.Fatal("valid at or past its expiry")
	}
	bob := fixedIdentity(t, 2)
	if _, err := tok.PairMessage(bob, "phone", exp.Add(-time.Millisecond)); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	for _, at := range []time.Time{exp, exp.Add(time.Second)} {
		wantErr(t, second(tok.PairMessage(bob, "phone", at)), ErrTokenExpired)
	}
}

func TestInviteLifetimeLimits(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	m, _ := NewGroup(alice, "home", "")
	for ttl, ok := range map[time.Duration]bool{
		MinInviteTTL: true, MaxInviteTTL: true, MinInviteTTL - time.Nanosecond: false,
		MaxInviteTTL + time.Nanosecond: false, 0: false, -time.Hour: false,
	} {
		_, err := m.Invite(alice, ttl, testNow)
		if (err == nil) != ok {
			t.Errorf("lifetime %v: %v", ttl, err)
		}
	}
	wantErr(t, second(m.Invite(bob, time.Hour, testNow)), ErrNotMember)
}

func TestTokensAreDistinctAndPrintNoSecret(t *testing.T) {
	tok, alice, m := newToken(t)
	again, _ := m.Invite(alice, time.Hour, testNow)
	if again.ID() == tok.ID() || again.Text() == tok.Text() {
		t.Fatal("two invitations share a secret")
	}
	s := tok.String()
	if !strings.Contains(s, tok.ID().String()) || !strings.Contains(s, `"home"`) || strings.Contains(s, tok.Text()[len(TokenPrefix):len(TokenPrefix)+20]) {
		t.Fatalf("String() = %q", s)
	}
	if p, ok := tok.SenderKey("home", alice.ID()); !ok || !p.Equal(alice.Public()) {
		t.Fatal("a token answers for its inviter")
	}
	if _, ok := tok.SenderKey("work", alice.ID()); ok {
		t.Fatal("a token answered for another group")
	}
	if _, ok := tok.SenderKey("home", fixedIdentity(t, 2).ID()); ok {
		t.Fatal("a token answered for another device")
	}
}
