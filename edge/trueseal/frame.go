package trueseal

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// Type is a frame's one-byte tag (trueseal-relay ADR-0008).
type Type uint8

// The frames. Each is one Noise transport message whose plaintext is
// [type: u8][len: u32 BE][body: len bytes].
const (
	// Push, client → relay on a push session:
	// [recipient static key: 32][envelope: opaque]. Answered by Ack or
	// Error, in push order.
	Push Type = 0x01
	// Deliver, relay → device on a receive session:
	// [blob id: u64 BE][envelope: opaque].
	Deliver Type = 0x02
	// Heartbeat, either way on a receive session: empty body.
	Heartbeat Type = 0x03
	// Ack, relay → client: empty body; the push it answers is on disk
	// (after the fsync of the group commit that holds it).
	Ack Type = 0x04
	// Error, relay → client: empty body; the push it answers is refused
	// for good (too large, malformed) and the session goes on.
	Error Type = 0x05
	// DeliverAck, device → relay: [blob id: u64 BE]; deletes that blob
	// from the device's own inbox.
	DeliverAck Type = 0x06
)

var typeNames = [...]string{Push: "Push", Deliver: "Deliver", Heartbeat: "Heartbeat", Ack: "Ack", Error: "Error", DeliverAck: "DeliverAck"}

func (t Type) String() string {
	if t == 0 || int(t) >= len(typeNames) {
		return "Type(" + strconv.Itoa(int(t)) + ")"
	}
	return typeNames[t]
}

// The sizes. Each is tested at and past its edge.
const (
	// HeaderBytes is a frame's header: type and body length.
	HeaderBytes = 5
	// MaxNoiseMessage is the largest Noise message, its length being a
	// u16 on the wire (the Noise specification's own limit).
	MaxNoiseMessage = 65535
	// TagBytes is the ChaChaPoly tag every transport message carries.
	TagBytes = 16
	// MaxFrameBytes is the largest frame: the plaintext of the largest
	// transport message.
	MaxFrameBytes = MaxNoiseMessage - TagBytes
	// MaxBodyBytes is the largest frame body.
	MaxBodyBytes = MaxFrameBytes - HeaderBytes
	// KeyBytes is an X25519 public key: the relay's, a device's, an
	// inbox address.
	KeyBytes = 32
	// BlobIDBytes is a blob id in Deliver and DeliverAck.
	BlobIDBytes = 8
	// MaxEnvelopeBytes is the largest envelope a Push can carry (65,482
	// bytes). trueseal-relay's own limit (1 MiB) cannot be reached over
	// its u16 message framing; this is the one that holds.
	MaxEnvelopeBytes = MaxBodyBytes - KeyBytes
)

// Frame decoding errors. A push session answers a Push frame that fails
// with Error, except one whose length claims more than the frame holds
// (ErrFrameTruncated), which it drops without an answer, as
// trueseal-relay does; every other frame that fails is dropped.
var (
	ErrShortFrame     = errors.New("trueseal: frame shorter than its 5-byte header")
	ErrUnknownType    = errors.New("trueseal: unknown frame type")
	ErrFrameTruncated = errors.New("trueseal: frame length claims more than the frame holds")
	ErrFrameLength    = errors.New("trueseal: frame holds more than its length says")
	ErrFrameTooLong   = errors.New("trueseal: frame longer than MaxFrameBytes")
	ErrShortBody      = errors.New("trueseal: frame body too short for its type")
)

// AppendFrame appends the frame of type t with body to dst.
func AppendFrame(dst []byte, t Type, body []byte) []byte {
	dst = append(dst, byte(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

// ParseFrame decodes one frame, the whole plaintext of a transport
// message. body aliases p. A length that claims more than p holds is
// ErrFrameTruncated, one that claims less ErrFrameLength. A frame of an
// unknown type is ErrUnknownType
// with its type returned, so a caller can tell a Push from the rest.
func ParseFrame(p []byte) (Type, []byte, error) {
	if len(p) > MaxFrameBytes {
		return 0, nil, ErrFrameTooLong
	}
	if len(p) < HeaderBytes {
		return 0, nil, ErrShortFrame
	}
	t := Type(p[0])
	n := binary.BigEndian.Uint32(p[1:HeaderBytes])
	if uint64(n) > uint64(len(p)-HeaderBytes) {
		return t, nil, ErrFrameTruncated
	}
	if uint64(n) < uint64(len(p)-HeaderBytes) {
		return t, nil, ErrFrameLength
	}
	if t == 0 || int(t) >= len(typeNames) {
		return t, nil, ErrUnknownType
	}
	return t, p[HeaderBytes:], nil
}

// AppendDeliverBody appends a Deliver body: the blob id, then the envelope.
func AppendDeliverBody(dst []byte, id uint64, envelope []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, id)
	return append(dst, envelope...)
}

// ParseBlobID reads the blob id at the head of a Deliver or DeliverAck
// body; rest is what follows it (the envelope of a Deliver; nothing in a
// well-formed DeliverAck).
func ParseBlobID(body []byte) (id uint64, rest []byte, err error) {
	if len(body) < BlobIDBytes {
		return 0, nil, ErrShortBody
	}
	return binary.BigEndian.Uint64(body), body[BlobIDBytes:], nil
}

// ParsePush splits a Push body into the recipient's key (its inbox
// address) and the envelope, which is never looked into.
func ParsePush(body []byte) (recipient, envelope []byte, err error) {
	if len(body) < KeyBytes {
		return nil, nil, ErrShortBody
	}
	return body[:KeyBytes], body[KeyBytes:], nil
}
