package seal

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// A DeviceID names a device: the first 20 bytes (160 bits) of
//
//	SHA-256("busbar device id\x00" || Public.Bytes())
//
// written as 32 characters of lower-case base32 (RFC 4648 alphabet, no
// padding), e.g. "3bqgdfmtrdyq7kbmhcd5wtj6cczw4xgy". It is derived from
// both public keys, so a device cannot claim another's id without its
// keys: finding a second key pair with a given id costs about 2^160 hash
// evaluations, and even two key pairs chosen together to share an id
// about 2^80. The relay routes by it; manifests and messages name devices
// by it.
type DeviceID [DeviceIDSize]byte

const deviceIDDomain = "busbar device id\x00"

// b32 is lower-case base32 without padding. Its decoder skips line breaks
// and ignores non-zero trailing bits, so strict decoders re-encode what
// they decoded and compare (decodeB32).
var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// decodeB32 decodes s only if it is exactly the canonical encoding of the
// result.
func decodeB32(s string) ([]byte, bool) {
	b, err := b32.DecodeString(s)
	if err != nil || b32.EncodeToString(b) != s {
		return nil, false
	}
	return b, true
}

// deviceIDTextLen is the length of a DeviceID's text form.
var deviceIDTextLen = b32.EncodedLen(DeviceIDSize)

func deriveDeviceID(public []byte) DeviceID {
	h := sha256.New()
	h.Write([]byte(deviceIDDomain))
	h.Write(public)
	var id DeviceID
	copy(id[:], h.Sum(nil))
	return id
}

// String returns the id's text form.
func (d DeviceID) String() string { return b32.EncodeToString(d[:]) }

// IsZero reports whether d is the zero id, which names no device.
func (d DeviceID) IsZero() bool { return d == DeviceID{} }

// ParseDeviceID reads an id's text form. Upper case is accepted, since
// people type ids; anything else that is not exactly 32 base32 characters
// is an error.
func ParseDeviceID(s string) (DeviceID, error) {
	var d DeviceID
	if len(s) != deviceIDTextLen {
		return d, fmt.Errorf("seal: device id %q: want %d base32 characters", clip(s), deviceIDTextLen)
	}
	b, ok := decodeB32(strings.ToLower(s))
	if !ok || len(b) != DeviceIDSize {
		return d, fmt.Errorf("seal: device id %q: not base32", clip(s))
	}
	copy(d[:], b)
	return d, nil
}

// MarshalText implements encoding.TextMarshaler (JSON keys and values).
func (d DeviceID) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseDeviceID.
func (d *DeviceID) UnmarshalText(b []byte) error {
	v, err := ParseDeviceID(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// clip shortens untrusted text before it is quoted into an error.
func clip(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
