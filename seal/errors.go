package seal

import (
	"errors"
	"fmt"
)

// Errors of Open, in the order Open checks. A recipient maps them onto
// delivery issues (docs/durable.md, "Opening a blob"): ErrVersionNewer
// leaves the blob unacked; every other one means ack, drop and report.
var (
	// ErrMalformed: the bytes do not follow the format (a bad magic, a
	// length out of bounds, an unknown kind, trailing bytes…). Decoders
	// of every format in this package wrap it with the detail.
	ErrMalformed = errors.New("seal: malformed")
	// ErrNotForMe: the blob is sealed to another device.
	ErrNotForMe = errors.New("seal: sealed to another device")
	// ErrBadSeal: the blob does not decrypt with this device's key: it
	// was damaged, or sealed to another key under this device's id.
	ErrBadSeal = errors.New("seal: does not open")
	// ErrUnknownSender: the sender is not a member of the group the
	// message names (never was, or was removed).
	ErrUnknownSender = errors.New("seal: sender is not a member")
	// ErrBadSignature: the author's signature does not verify.
	ErrBadSignature = errors.New("seal: bad signature")
)

// An UnknownSenderError is Open's error when senders has no key for the
// message's sender: the blob was sealed to this device and decoded, but
// its signature could not be checked. It matches ErrUnknownSender with
// errors.Is. Its fields are what the message claims, unverified; they let
// a recipient keep a membership message whose signer it does not know
// yet (it arrived before the manifest that added the signer) and open it
// again once it does, rather than drop it.
type UnknownSenderError struct {
	Kind   Kind
	ID     MessageID
	Sender DeviceID
	Group  string
	// Epoch is the epoch of the manifest a GroupManifest, Leave or
	// Revoke message carries; 0 for other kinds or a body that is not a
	// manifest.
	Epoch uint64
}

func (e *UnknownSenderError) Error() string {
	return fmt.Sprintf("%v: %s in group %q (%s message %s)", ErrUnknownSender, e.Sender, e.Group, e.Kind, e.ID)
}

// Is makes errors.Is(err, ErrUnknownSender) hold.
func (e *UnknownSenderError) Is(target error) bool { return target == ErrUnknownSender }

// ErrVersionNewer: a blob written in a newer end-to-end version than this
// package reads. The recipient keeps it unacked until it upgrades.
type ErrVersionNewer struct{ V uint16 }

func (e ErrVersionNewer) Error() string {
	return fmt.Sprintf("seal: end-to-end version %d is newer than %d", e.V, Version)
}

// ErrVersionOlder: a blob written in an older end-to-end version than this
// package reads. The sender is outdated; the recipient drops the blob.
type ErrVersionOlder struct{ V uint16 }

func (e ErrVersionOlder) Error() string {
	return fmt.Sprintf("seal: end-to-end version %d is older than %d", e.V, Version)
}

// ErrPayloadTooLarge: a body over MaxPayloadBytes, refused before anything
// is signed or sealed.
type ErrPayloadTooLarge struct{ Size, Max int }

func (e ErrPayloadTooLarge) Error() string {
	return fmt.Sprintf("seal: payload of %d bytes is over the limit of %d", e.Size, e.Max)
}

// Errors of the key files.
var (
	// ErrInsecureKeyFile: the key file may be read or written by group
	// or others, or its directory written by them.
	ErrInsecureKeyFile = errors.New("seal: insecure key file permissions")
	// ErrKeyExists: Save found a key file already there; it never
	// replaces one, since that would change the device's id.
	ErrKeyExists = errors.New("seal: a device key already exists")
)

// Errors of group manifests and membership.
var (
	// ErrStaleManifest: the manifest's epoch is not above the current
	// one. A replayed control message ends here and changes nothing.
	ErrStaleManifest = errors.New("seal: manifest epoch is not newer")
	// ErrUnauthorizedSigner: the manifest is signed by a device that may
	// not sign it (not a member of the previous manifest, not the
	// inviter, not the creator of a new group, not the control
	// message's sender).
	ErrUnauthorizedSigner = errors.New("seal: manifest signer not allowed")
	// ErrWrongGroup: the manifest, message or token names another group.
	ErrWrongGroup = errors.New("seal: wrong group")
	// ErrTooManyMembers: more than MaxGroupMembers members.
	ErrTooManyMembers = errors.New("seal: too many members")
	// ErrNotMember: the device must be a member and is not (the author
	// of a change, a device to remove, the joiner in its first manifest).
	ErrNotMember = errors.New("seal: not a member")
	// ErrAlreadyMember: Add of a device that is already a member.
	ErrAlreadyMember = errors.New("seal: already a member")
	// ErrBadChange: a Leave or Revoke whose manifest does not make the
	// change the kind names.
	ErrBadChange = errors.New("seal: control message does not match its change")
)

// Errors of invitation tokens and pairing.
var (
	// ErrBadToken: the text is not an invitation token, or it was
	// damaged when copied.
	ErrBadToken = errors.New("seal: not a valid invitation token")
	// ErrTokenExpired: the token's expiry has passed.
	ErrTokenExpired = errors.New("seal: invitation token expired")
	// ErrBadProof: the Pair message does not prove possession of the
	// token's secret.
	ErrBadProof = errors.New("seal: pairing proof does not match the token")
)

// malformed wraps ErrMalformed with what was wrong.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// MessageError is a failure of Open after the blob was decrypted: the
// message's id, kind, sender and group as the blob states them, so that a
// delivery issue can name the message it is about. They are unverified
// when the signature or the sender is what failed. Err is the failure
// (errors.Is and errors.As see through to it).
type MessageError struct {
	ID     MessageID
	Kind   Kind
	Sender DeviceID
	Group  string
	Err    error
}

func (e *MessageError) Error() string { return e.Err.Error() }

func (e *MessageError) Unwrap() error { return e.Err }

// aboutMessage wraps a failure of Open to open msg.
func aboutMessage(msg *Inner, err error) error {
	return &MessageError{ID: msg.ID, Kind: msg.Kind, Sender: msg.Sender, Group: msg.Group, Err: err}
}
