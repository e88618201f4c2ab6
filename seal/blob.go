package seal

import (
	"crypto/ed25519"
	"crypto/hpke"
	"encoding/binary"
	"fmt"
)

// Blob layout (docs/durable.md, "The sealed blob"):
//
//	offset  size  field
//	0       4     magic "BBSL"
//	4       2     end-to-end version, uint16 BE
//	6       20    recipient device id
//	26      1120  HPKE encapsulated key (MLKEM768-X25519)
//	1146    n+16  ChaCha20-Poly1305 ciphertext of the n-byte inner message, with its tag
//
// The first 26 bytes are the clear header: all a relay needs to route a
// blob and all a recipient needs for its version check; nothing in it
// names the sender. Magic, version and recipient keep these offsets in
// every version, so PeekVersion and PeekRecipient read blobs of versions
// they cannot open. The HPKE info string is sealInfoDomain followed by the
// header, so changing any header byte makes the blob fail to open.
const (
	blobMagic      = "BBSL"
	sealInfoDomain = "busbar seal\x00"
)

// Senders finds the key a sender signs with: the Public of device id as a
// member of group, or false if it is not one. *Manifest and *Token
// implement it; SendersFunc adapts a function (for a device in several
// groups).
type Senders interface {
	SenderKey(group string, id DeviceID) (Public, bool)
}

// SendersFunc adapts a function to Senders.
type SendersFunc func(group string, id DeviceID) (Public, bool)

// SenderKey calls f.
func (f SendersFunc) SenderKey(group string, id DeviceID) (Public, bool) { return f(group, id) }

func makeHeader(v uint16, to DeviceID) [HeaderSize]byte {
	var h [HeaderSize]byte
	copy(h[:], blobMagic)
	binary.BigEndian.PutUint16(h[4:], v)
	copy(h[6:], to[:])
	return h
}

func sealInfo(hdr []byte) []byte {
	return append([]byte(sealInfoDomain), hdr...)
}

// Seal signs msg as author and seals it to one recipient device. msg must
// come from NewMessage (or carry an ID and Timestamp kept from one):
// sealing the same msg again, for a retry, gives the same signed inner
// bytes, so the recipient sees the same message id and sender timestamp;
// only the encryption is fresh. A body over MaxPayloadBytes is refused
// with ErrPayloadTooLarge before anything is signed.
func Seal(author *Identity, to Public, msg Inner) ([]byte, error) {
	if to.IsZero() {
		return nil, fmt.Errorf("seal: no recipient")
	}
	switch {
	case msg.Sender.IsZero():
		msg.Sender = author.ID()
	case msg.Sender != author.ID():
		return nil, fmt.Errorf("seal: message names sender %s, author is %s", msg.Sender, author.ID())
	}
	if err := msg.check(); err != nil {
		return nil, err
	}
	hdr := makeHeader(Version, to.ID())
	return sealInner(to, hdr[:], signInner(author, hdr[:], &msg))
}

// sealInner encrypts signed inner bytes to the blob with header hdr.
func sealInner(to Public, hdr, inner []byte) ([]byte, error) {
	enc, s, err := hpke.NewSender(to.kem, kdf, aead, sealInfo(hdr))
	if err != nil {
		return nil, fmt.Errorf("seal: %v", err)
	}
	ct, err := s.Seal(nil, inner)
	if err != nil {
		return nil, fmt.Errorf("seal: %v", err)
	}
	blob := make([]byte, 0, len(hdr)+len(enc)+len(ct))
	blob = append(blob, hdr...)
	blob = append(blob, enc...)
	return append(blob, ct...), nil
}

// Open opens a blob sealed to me and checks its author. The checks, in
// order, and what each failure returns:
//
//   - the magic and the length of the header: ErrMalformed
//   - the end-to-end version: ErrVersionNewer, ErrVersionOlder
//   - the size, between MinSealedSize and MaxSealedSize: ErrMalformed
//   - the recipient is me: ErrNotForMe
//   - HPKE opens it: ErrBadSeal
//   - the inner message decodes strictly: ErrMalformed
//   - the sender's key: from senders, for (group, sender), else
//     *UnknownSenderError (ErrUnknownSender). A Pair comes from a
//     device that is not yet a member: its key is the joiner key in its
//     body, which must hash to the sender id. Open proves only that the sender holds that key;
//     whether it may join is Token.VerifyPair's decision.
//   - the signature: ErrBadSignature
//
// Errors other than ErrVersionNewer and ErrVersionOlder wrap their
// sentinel with detail; test with errors.Is and errors.As.
func Open(me *Identity, blob []byte, senders Senders) (Inner, error) {
	v, err := PeekVersion(blob)
	if err != nil {
		return Inner{}, err
	}
	if err := CheckVersion(v); err != nil {
		return Inner{}, err
	}
	if len(blob) < MinSealedSize || len(blob) > MaxSealedSize {
		return Inner{}, malformed("blob of %d bytes, want %d to %d", len(blob), MinSealedSize, MaxSealedSize)
	}
	hdr := blob[:HeaderSize]
	if DeviceID(hdr[6:]) != me.ID() {
		return Inner{}, fmt.Errorf("%w: for %s, this is %s", ErrNotForMe, DeviceID(hdr[6:]), me.ID())
	}
	inner, err := hpke.Open(me.kem, kdf, aead, sealInfo(hdr), blob[HeaderSize:])
	if err != nil {
		return Inner{}, fmt.Errorf("%w: %v", ErrBadSeal, err)
	}
	msg, sig, err := decodeInner(inner)
	if err != nil {
		return Inner{}, err
	}
	key, err := senderKey(&msg, senders)
	if err != nil {
		return Inner{}, aboutMessage(&msg, err)
	}
	signed := make([]byte, 0, len(sigDomain)+HeaderSize+len(inner)-len(sig))
	signed = append(signed, sigDomain...)
	signed = append(signed, hdr...)
	signed = append(signed, inner[:len(inner)-len(sig)]...)
	if !ed25519.Verify(key.sign, signed, sig) {
		return Inner{}, aboutMessage(&msg, fmt.Errorf("%w: %s message %s from %s", ErrBadSignature, msg.Kind, msg.ID, msg.Sender))
	}
	return msg, nil
}

func senderKey(msg *Inner, senders Senders) (Public, error) {
	if msg.Kind == KindPair {
		p, err := ParsePair(msg.Body)
		if err != nil {
			return Public{}, err
		}
		if p.Joiner.ID() != msg.Sender {
			return Public{}, fmt.Errorf("%w: pair from %s carries the key of %s", ErrUnknownSender, msg.Sender, p.Joiner.ID())
		}
		return p.Joiner, nil
	}
	var key Public
	ok := false
	if senders != nil {
		key, ok = senders.SenderKey(msg.Group, msg.Sender)
	}
	if !ok || key.ID() != msg.Sender {
		e := &UnknownSenderError{Kind: msg.Kind, ID: msg.ID, Sender: msg.Sender, Group: msg.Group}
		if msg.Kind.Control() {
			if m, err := ParseManifest(msg.Body); err == nil {
				e.Epoch = m.epoch
			}
		}
		return Public{}, e
	}
	return key, nil
}

// PeekVersion reads a blob's end-to-end version from its clear header,
// without keys. It fails (ErrMalformed) only if the blob is shorter than
// magic and version or its magic is wrong; it reads any version.
func PeekVersion(blob []byte) (uint16, error) {
	if len(blob) < 6 || string(blob[:4]) != blobMagic {
		return 0, malformed("not a sealed blob")
	}
	return binary.BigEndian.Uint16(blob[4:6]), nil
}

// PeekRecipient reads a blob's recipient device id from its clear header,
// without keys, in any version (the header's prefix is the same in all).
func PeekRecipient(blob []byte) (DeviceID, error) {
	if _, err := PeekVersion(blob); err != nil {
		return DeviceID{}, err
	}
	if len(blob) < HeaderSize {
		return DeviceID{}, malformed("blob header truncated at %d bytes", len(blob))
	}
	return DeviceID(blob[6:HeaderSize]), nil
}

// CheckHeader refuses (ErrMalformed) a blob whose clear header no sealing
// could have produced: a version below 1 or more than 1,000 ahead of this
// one, an all-zero recipient (a device id is a hash), or, for this
// version, a size outside MinSealedSize..MaxSealedSize. A later version's
// size is its own business: a relay holds such blobs for devices that
// will upgrade. What a relay checks before it stores a blob.
func CheckHeader(blob []byte) error {
	v, err := PeekVersion(blob)
	if err != nil {
		return err
	}
	to, err := PeekRecipient(blob)
	if err != nil {
		return err
	}
	switch {
	case v == 0 || v > Version+maxVersionsAhead:
		return malformed("blob version %d is not one any sealing writes", v)
	case to == DeviceID{}:
		return malformed("blob for the all-zero device id")
	case v == Version && (len(blob) < MinSealedSize || len(blob) > MaxSealedSize):
		return malformed("a version %d blob of %d bytes, outside %d..%d", v, len(blob), MinSealedSize, MaxSealedSize)
	}
	return nil
}

// maxVersionsAhead bounds how far ahead of Version a blob's version may
// be before CheckHeader calls it impossible.
const maxVersionsAhead = 1000

// CheckVersion applies the version rule: nil for Version, ErrVersionNewer
// for a later one (hold the blob unacked until this device upgrades),
// ErrVersionOlder for an earlier one (the sender is outdated: drop it).
func CheckVersion(v uint16) error {
	switch {
	case v > Version:
		return ErrVersionNewer{V: v}
	case v < Version:
		return ErrVersionOlder{V: v}
	}
	return nil
}
