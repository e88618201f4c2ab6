package seal

import "crypto/ed25519"

// Version is the end-to-end version this package writes and reads. It
// travels in the clear header of every blob (see docs/durable.md, "The
// version rule"): a recipient holds a newer blob unacked until it upgrades,
// and drops an older one as unreadable.
const Version uint16 = 1

// Limits. Each is checked by the encoder and by the strict decoder, and
// tested at and past its edge.
const (
	// MaxPayloadBytes is the largest body a message may carry: 61,440
	// bytes (60 KiB), the protocol size limit of durable delivery. It
	// holds for every kind, so a group manifest must fit too (it does:
	// see MaxManifestBytes).
	MaxPayloadBytes = 61440

	// MaxGroupMembers is the most devices a group manifest may list.
	MaxGroupMembers = 32

	// MaxGroupNameLen bounds a group name, in bytes. A name is 1 to
	// MaxGroupNameLen bytes of [A-Za-z0-9._-], starting with a letter or
	// digit.
	MaxGroupNameLen = 64

	// MaxLabelLen bounds a member's label (a device name for people,
	// such as "kitchen laptop"), in bytes of UTF-8 without control
	// characters. A label may be empty.
	MaxLabelLen = 64
)

// Sizes of the fixed parts of the formats, in bytes.
const (
	// DeviceIDSize is the length of a device id in binary form; its text
	// form is 32 characters of lower-case base32.
	DeviceIDSize = 20

	// MessageIDSize is the length of a message id: 16 random bytes.
	MessageIDSize = 16

	// PublicSize is the length of a Public's binary encoding: a suite
	// byte, the Ed25519 key and the MLKEM768-X25519 encapsulation key.
	PublicSize = 1 + ed25519.PublicKeySize + kemPublicSize

	// HeaderSize is the clear header of a blob: magic, end-to-end
	// version, recipient device id.
	HeaderSize = 4 + 2 + DeviceIDSize

	// innerFixed is an inner message without its group name and body:
	// kind, message id, sender id, timestamp, group length, body length,
	// signature.
	innerFixed = 1 + MessageIDSize + DeviceIDSize + 8 + 1 + 4 + ed25519.SignatureSize

	// MaxInnerSize is the largest inner (signed, not yet sealed) message.
	MaxInnerSize = innerFixed + MaxGroupNameLen + MaxPayloadBytes

	// SealOverhead is what sealing adds to an inner message: the clear
	// header, the HPKE encapsulated key and the AEAD tag.
	SealOverhead = HeaderSize + kemEncSize + aeadTagSize

	// MinSealedSize is the smallest well-formed blob (one-byte group
	// name, empty body).
	MinSealedSize = SealOverhead + innerFixed + 1

	// MaxSealedSize is the largest well-formed blob: a body of
	// MaxPayloadBytes with the longest group name. A relay can refuse
	// anything larger as malformed without reading it.
	MaxSealedSize = SealOverhead + MaxInnerSize

	// MaxManifestBytes is the largest encoded group manifest: the
	// longest name, MaxGroupMembers members with the longest labels.
	// It is below MaxPayloadBytes, so any manifest fits in one message.
	MaxManifestBytes = manifestFixed + MaxGroupNameLen + MaxGroupMembers*(PublicSize+1+MaxLabelLen)
)

// Sizes fixed by the HPKE suite (MLKEM768-X25519, HKDF-SHA256,
// ChaCha20-Poly1305).
const (
	kemPublicSize = 1216 // ML-KEM-768 encapsulation key (1184) + X25519 point (32)
	kemSeedSize   = 32   // the private key is stored as its 32-byte seed
	kemEncSize    = 1120 // ML-KEM-768 ciphertext (1088) + X25519 point (32)
	aeadTagSize   = 16
)
