package seal

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// Kind is what an inner message is for.
type Kind uint8

// The kinds. Sync carries an application's body; the others are control
// messages that the library handles itself (docs/durable.md, "Groups").
const (
	KindSync          Kind = 1 // an application message
	KindPair          Kind = 2 // a new device asks to join (body: Pair)
	KindGroupManifest Kind = 3 // a new manifest (body: Manifest)
	KindLeave         Kind = 4 // the sender leaves (body: Manifest without it)
	KindRevoke        Kind = 5 // the sender removes others (body: Manifest without them)
)

var kindNames = [...]string{KindSync: "sync", KindPair: "pair", KindGroupManifest: "group-manifest", KindLeave: "leave", KindRevoke: "revoke"}

func (k Kind) valid() bool { return k >= KindSync && k <= KindRevoke }

// String returns the kind's name, e.g. "group-manifest".
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Control reports whether k is a control message: one that never
// expires, skips the dedup table and changes no state when replayed.
func (k Kind) Control() bool { return k.valid() && k != KindSync }

// A MessageID names one send: 16 random bytes drawn when the message is
// made (NewMessage). Every redelivery and every re-seal of that message
// carries the same id; two sends of identical bytes carry different ones.
type MessageID [MessageIDSize]byte

// String returns the id as 32 hex digits.
func (m MessageID) String() string { return hex.EncodeToString(m[:]) }

// IsZero reports whether m is the zero id, which no message carries.
func (m MessageID) IsZero() bool { return m == MessageID{} }

// Inner is a message before sealing and after opening: everything only
// the recipient may read. Open fills every field; Seal takes them as
// they are, filling only Sender.
type Inner struct {
	Kind Kind
	// ID names the send (see MessageID).
	ID MessageID
	// Sender is the author's device id. Seal sets it from the author;
	// a non-zero value that is not the author's is an error.
	Sender DeviceID
	// Group is the group the message belongs to; the recipient checks
	// the sender against that group's manifest.
	Group string
	// Timestamp is the sender's clock when the message was made, in
	// whole milliseconds since 1970. It is stamped once (NewMessage) and
	// kept by every re-seal.
	Timestamp time.Time
	// Body is the application's bytes for Sync, an encoded Pair or
	// Manifest for the control kinds. At most MaxPayloadBytes. Open
	// returns a slice of its own buffer, not shared with the blob.
	Body []byte
}

// NewMessage makes a message ready to seal: it draws a fresh message id
// and stamps now (to the millisecond) as the sender timestamp. Keep the
// returned value (or its ID and Timestamp) to seal the same message again
// for a retry or for another recipient. Body is not copied.
func NewMessage(kind Kind, group string, body []byte, now time.Time) (Inner, error) {
	m := Inner{Kind: kind, Group: group, Timestamp: time.UnixMilli(now.UnixMilli()), Body: body}
	rand.Read(m.ID[:]) // never fails (crypto/rand)
	if err := m.check(); err != nil {
		return Inner{}, err
	}
	return m, nil
}

// check validates the fields an encoder needs.
func (m *Inner) check() error {
	switch {
	case !m.Kind.valid():
		return fmt.Errorf("seal: unknown message kind %d", m.Kind)
	case m.ID.IsZero():
		return fmt.Errorf("seal: message has no id (make it with NewMessage)")
	case !ValidGroupName(m.Group):
		return fmt.Errorf("seal: invalid group name %q", clip(m.Group))
	case m.Timestamp.UnixMilli() <= 0:
		return fmt.Errorf("seal: message has no sender timestamp (make it with NewMessage)")
	case len(m.Body) > MaxPayloadBytes:
		return ErrPayloadTooLarge{Size: len(m.Body), Max: MaxPayloadBytes}
	}
	return nil
}

// Inner message layout (docs/durable.md, "The inner message"):
//
//	kind (1) | message id (16) | sender id (20) | timestamp, ms, int64 BE (8)
//	| group length (1) | group | body length, uint32 BE (4) | body | Ed25519 signature (64)
//
// The signature covers sigDomain, the blob's clear header (so a recipient
// cannot re-seal the message to a third device as if it were sent there),
// and every inner byte before the signature.
const sigDomain = "busbar seal signature\x00"

// signInner encodes m from author to the blob with header hdr and signs
// it. It returns the inner bytes (a suffix of one buffer that also holds
// the signed prefix). Ed25519 is deterministic: the same m, author and
// header always give the same bytes.
func signInner(author *Identity, hdr []byte, m *Inner) []byte {
	n := innerFixed + len(m.Group) + len(m.Body)
	buf := make([]byte, 0, len(sigDomain)+len(hdr)+n)
	buf = append(buf, sigDomain...)
	buf = append(buf, hdr...)
	start := len(buf)
	buf = append(buf, byte(m.Kind))
	buf = append(buf, m.ID[:]...)
	buf = append(buf, m.Sender[:]...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(m.Timestamp.UnixMilli()))
	buf = putShort(buf, m.Group)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(m.Body)))
	buf = append(buf, m.Body...)
	buf = append(buf, ed25519.Sign(author.sign, buf)...)
	return buf[start:]
}

// decodeInner strictly decodes inner bytes. Body aliases b.
func decodeInner(b []byte) (m Inner, sig []byte, err error) {
	r := reader{b: b, what: "inner message"}
	m.Kind = Kind(r.u8("kind"))
	copy(m.ID[:], r.take(MessageIDSize, "message id"))
	copy(m.Sender[:], r.take(DeviceIDSize, "sender id"))
	ts := int64(r.u64("timestamp"))
	m.Group = string(r.short(MaxGroupNameLen, "group"))
	n := r.u32("body length")
	if r.err == nil && n > MaxPayloadBytes {
		r.fail(malformed("inner message: body of %d bytes, at most %d", n, MaxPayloadBytes))
	}
	m.Body = r.take(int(n), "body")
	sig = r.take(ed25519.SignatureSize, "signature")
	if err := r.end(); err != nil {
		return Inner{}, nil, err
	}
	switch {
	case !m.Kind.valid():
		return Inner{}, nil, malformed("inner message: unknown kind %d", m.Kind)
	case m.ID.IsZero():
		return Inner{}, nil, malformed("inner message: zero message id")
	case m.Sender.IsZero():
		return Inner{}, nil, malformed("inner message: zero sender id")
	case ts <= 0:
		return Inner{}, nil, malformed("inner message: timestamp %d before 1970", ts)
	case !ValidGroupName(m.Group):
		return Inner{}, nil, malformed("inner message: invalid group name %q", clip(m.Group))
	}
	m.Timestamp = time.UnixMilli(ts)
	return m, sig, nil
}
