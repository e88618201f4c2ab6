package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"time"
)

// A Pair is the body of a KindPair message: a device asking to join the
// group of a token it holds. Body layout:
//
//	format 1 (1) | token id (16) | joiner Public (1249) | label length (1) | label | proof (32)
//
// The proof is HMAC-SHA256 keyed with the token's secret over
//
//	"busbar pair proof\x00" | token id | group length (1) | group | joiner Public | label length (1) | label
//
// so only a holder of the token can make it, and it binds the joiner's
// keys: a Pair cannot be replayed for another device.
type Pair struct {
	Token  TokenID // the token it answers, for the inviter to find it
	Joiner Public  // the new device's keys
	Label  string  // the new device's label in the manifest
	proof  [sha256.Size]byte
}

const (
	pairFormat      = 1
	pairProofDomain = "busbar pair proof\x00"
)

// PairMessage makes the Pair message with which joiner answers t, ready
// to Seal to t.Inviter(). It fails if t is expired at now.
func (t *Token) PairMessage(joiner *Identity, label string, now time.Time) (Inner, error) {
	if t.Expired(now) {
		return Inner{}, fmt.Errorf("%w: at %s", ErrTokenExpired, t.expires.UTC().Format(time.RFC3339))
	}
	if !ValidLabel(label) {
		return Inner{}, fmt.Errorf("seal: invalid label %q", clip(label))
	}
	p := Pair{Token: t.ID(), Joiner: joiner.Public(), Label: label}
	p.proof = t.proof(&p)
	return NewMessage(KindPair, t.group, p.bytes(), now)
}

func (t *Token) proof(p *Pair) [sha256.Size]byte {
	mac := hmac.New(sha256.New, t.secret[:])
	mac.Write([]byte(pairProofDomain))
	mac.Write(p.Token[:])
	mac.Write(putShort(nil, t.group))
	mac.Write([]byte(p.Joiner.raw))
	mac.Write(putShort(nil, p.Label))
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	return sum
}

func (p *Pair) bytes() []byte {
	b := make([]byte, 0, 1+len(p.Token)+PublicSize+1+len(p.Label)+len(p.proof))
	b = append(b, pairFormat)
	b = append(b, p.Token[:]...)
	b = append(b, p.Joiner.raw...)
	b = putShort(b, p.Label)
	return append(b, p.proof[:]...)
}

// ParsePair strictly decodes a Pair message's body. It checks the form,
// not the proof: that needs the token (VerifyPair).
func ParsePair(body []byte) (*Pair, error) {
	r := reader{b: body, what: "pair"}
	if f := r.u8("format"); r.err == nil && f != pairFormat {
		r.fail(malformed("pair: format %d, this build reads %d", f, pairFormat))
	}
	p := &Pair{}
	copy(p.Token[:], r.take(len(p.Token), "token id"))
	raw := r.take(PublicSize, "joiner key")
	p.Label = string(r.short(MaxLabelLen, "label"))
	copy(p.proof[:], r.take(len(p.proof), "proof"))
	if err := r.end(); err != nil {
		return nil, err
	}
	if !ValidLabel(p.Label) {
		return nil, malformed("pair: invalid label %q", clip(p.Label))
	}
	var err error
	if p.Joiner, err = ParsePublic(raw); err != nil {
		return nil, err
	}
	return p, nil
}

// VerifyPair is the inviter's check of an opened Pair message against
// the token it answers (find it by ParsePair(msg.Body).Token): the
// message is a Pair for t's group (ErrWrongGroup) answering t, with a
// proof made from t's secret (ErrBadProof), and t is not expired at now
// (ErrTokenExpired). On success it returns the Pair; the inviter then
// records t as used, so that it accepts one join per token, and sends
// the manifest with the joiner (Manifest.Add) to every member.
func (t *Token) VerifyPair(msg Inner, now time.Time) (*Pair, error) {
	if msg.Kind != KindPair {
		return nil, fmt.Errorf("seal: %s message is not a pair", msg.Kind)
	}
	if msg.Group != t.group {
		return nil, fmt.Errorf("%w: pair for %q, token for %q", ErrWrongGroup, msg.Group, t.group)
	}
	p, err := ParsePair(msg.Body)
	if err != nil {
		return nil, err
	}
	if t.Expired(now) {
		return nil, fmt.Errorf("%w: at %s", ErrTokenExpired, t.expires.UTC().Format(time.RFC3339))
	}
	want := t.proof(p)
	if p.Token != t.ID() || p.Joiner.ID() != msg.Sender || !hmac.Equal(p.proof[:], want[:]) {
		return nil, fmt.Errorf("%w: from %s for token %s", ErrBadProof, msg.Sender, t.ID())
	}
	return p, nil
}
