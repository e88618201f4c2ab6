// Package seal is the sealing and membership layer of durable end-to-end
// delivery: device identities, sealed blobs, group manifests and
// invitation tokens. It does no I/O beyond the key file and holds no
// state; the outbox, the relay and the recipient build on it. It uses only
// the standard library. The formats, byte by byte, and the rules are in
// docs/durable.md.
//
// # Identities
//
// A device has an Identity (Generate, Save, Load): an Ed25519 key that
// signs and an HPKE key (MLKEM768-X25519, a hybrid of ML-KEM-768 and
// X25519, with HKDF-SHA256 and ChaCha20-Poly1305) that others seal to.
// Its public half is a Public; its name, a DeviceID, is derived from both
// public keys. The key file (KeyFile) is mode 0600 in a directory of mode
// 0700, and Load refuses a key file that group or others may read.
//
// # Blobs
//
// Seal signs a message (Inner) as its author and seals it to one
// recipient device; Open reverses both and checks the author against the
// group's manifest. A blob's clear header holds only a magic, the
// end-to-end version and the recipient's device id: what a relay routes
// by and what the recipient's version check reads (PeekVersion,
// PeekRecipient, CheckVersion). The sender, the group, the kind, the
// message id and the sender timestamp are inside the seal. A relay sees
// the recipient, the size and the timing.
//
// A message is made once (NewMessage draws its id and stamps its sender
// timestamp) and may be sealed again for a retry: the signed inner bytes
// are the same, so the recipient sees the same id and timestamp.
//
// Open's errors tell a recipient what to do: ErrVersionNewer, hold the
// blob unacked until this device upgrades; ErrVersionOlder, drop it, the
// sender is outdated; ErrMalformed, ErrNotForMe, ErrBadSeal,
// ErrUnknownSender (a non-member or a revoked member) and
// ErrBadSignature, ack it, drop it and report a delivery issue.
//
// # Groups
//
// A group of at most MaxGroupMembers devices is described by a signed
// Manifest with an epoch that grows with every change. A member invites
// a device with a Token (Manifest.Invite, Token.Text); the device joins
// with a Pair message (ParseToken, Token.PairMessage), which the inviter
// checks (Token.VerifyPair) before it sends the next manifest
// (Manifest.Add) to every member. Leave and Revoke carry the next
// manifest too. A recipient applies these control messages with
// ApplyControl (or ApplyInvited for a joiner's first manifest); a replay
// has an epoch that is not newer and changes nothing (ErrStaleManifest).
//
// Sealing is per recipient device: a sender seals to every member of the
// manifest it holds (Manifest.Recipients), so a device removed from the
// group cannot read anything sent after the sender learned of its
// removal.
//
// Every value in this package is immutable once made and safe for
// concurrent use.
package seal
