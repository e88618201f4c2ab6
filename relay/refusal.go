package relay

import (
	"errors"
	"fmt"
)

// Code says why a push was refused. The codes are the relay's refusals in
// the trueseal delivery contract: TooLarge and Malformed are permanent (the
// sender drops the entry and raises sendFailed), the others temporary (the
// sender keeps the entry queued and retries with backoff).
type Code uint8

const (
	TooLarge    Code = iota + 1 // the blob is over Options.MaxBlobBytes; permanent
	Malformed                   // an empty blob or a device id that is not one (ValidDevice); permanent
	InboxFull                   // the device's inbox is at MaxInboxBlobs or MaxInboxBytes; temporary
	RateLimited                 // the device's inbox takes no more than MaxPushRate pushes a second; temporary
	Unavailable                 // the store is closing or closed; temporary
	Internal                    // the log could not be written or synced; temporary
)

var codeNames = [...]string{
	TooLarge:    "too large",
	Malformed:   "malformed",
	InboxFull:   "inbox full",
	RateLimited: "rate limited",
	Unavailable: "unavailable",
	Internal:    "internal error",
}

func (c Code) String() string {
	if c == 0 || int(c) >= len(codeNames) {
		return fmt.Sprintf("code(%d)", uint8(c))
	}
	return codeNames[c]
}

// Temporary reports whether a push refused with c may succeed later.
func (c Code) Temporary() bool { return c >= InboxFull && int(c) < len(codeNames) }

// Refusal is a push the store did not take. It carries the code and
// nothing else: no device id, no byte of the blob, no cause (Internal's
// cause goes to Options.Logger), so it can be sent to the pushing peer as
// it is.
type Refusal struct {
	Code      Code
	Temporary bool // Code.Temporary(), for callers that only sort by kind
}

func (r *Refusal) Error() string {
	kind := "permanent"
	if r.Temporary {
		kind = "temporary"
	}
	return "relay: push refused: " + r.Code.String() + " (" + kind + ")"
}

// Is matches any *Refusal with the same code, so errors.Is(err,
// relay.ErrInboxFull) works whatever the refusal's identity.
func (r *Refusal) Is(target error) bool {
	t, ok := target.(*Refusal)
	return ok && t.Code == r.Code
}

// One refusal per code, shared: the store returns these values (do not
// modify them) and errors.Is compares by code.
var (
	ErrTooLarge    = &Refusal{Code: TooLarge}
	ErrMalformed   = &Refusal{Code: Malformed}
	ErrInboxFull   = &Refusal{Code: InboxFull, Temporary: true}
	ErrRateLimited = &Refusal{Code: RateLimited, Temporary: true}
	ErrUnavailable = &Refusal{Code: Unavailable, Temporary: true}
	ErrInternal    = &Refusal{Code: Internal, Temporary: true}
)

// RefusalCode returns the code of the refusal in err's chain, if any.
func RefusalCode(err error) (Code, bool) {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Code, true
	}
	return 0, false
}

// ErrClosed is returned by Session.Next, Ack and Session once Close has
// begun. (Push says the same with ErrUnavailable, a refusal the sender
// retries.)
var ErrClosed = errors.New("relay: store closed")

// ErrNoSuchBlob is returned by Ack when the device's inbox holds no blob
// with that sequence number: acked already, expired, or another device's.
// Nothing is deleted.
var ErrNoSuchBlob = errors.New("relay: no such blob in this device's inbox")

// ErrDamaged is matched (errors.Is) by the error of Open when the log holds
// damage that a crash cannot explain: a bad record before the end of the
// newest segment, or a bad segment header. The store does not open on it;
// the error names the file and the way out.
var ErrDamaged = errors.New("relay: the store is damaged")

// damagedError says which file, where, what is wrong, and the way out.
type damagedError struct {
	file string
	off  int64
	err  error
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("relay: store file %s is damaged at byte %d: %v. "+
		"The relay does not start on it. To start anyway, move that file out of the directory and restart: "+
		"the blobs it held are lost (their senders were acked), and blobs acked in it may be delivered again "+
		"(see docs/relay-store.md#crashes-and-damage)", e.file, e.off, e.err)
}

func (e *damagedError) Unwrap() error        { return e.err }
func (e *damagedError) Is(target error) bool { return target == ErrDamaged }
