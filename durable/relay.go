package durable

import (
	"context"
	"errors"

	"busbar/seal"
)

// Relay is the relay as a device uses it: the broker over a client
// connection in production (docs/durable.md, "The relay on the broker
// connection"), a relay.Store in the tests.
type Relay interface {
	// Push stores a sealed blob; it returns once the relay has it on
	// disk. A refusal is an error for which Permanent tells the
	// permanent codes (TOO_LARGE, MALFORMED) from the temporary ones.
	Push(ctx context.Context, blob []byte) (seq uint64, err error)
	// Receive opens this device's receive session: blobs in arrival
	// order, each once; Ack deletes one.
	Receive(ctx context.Context, me *seal.Identity) (Session, error)
}

// PipelinedRelay is a Relay that takes several pushes without waiting for
// each answer (NewClientRelay's does): Flush sends up to FlushWindow of a
// recipient's entries at once to one. The relay stores them in the order
// given, and refuses every push behind one it refused temporarily, so a
// refused entry is never overtaken by those behind it.
type PipelinedRelay interface {
	Relay
	// PushAll pushes blobs in order and returns each one's outcome, as
	// Push would.
	PushAll(ctx context.Context, blobs [][]byte) []PushResult
}

// PushResult is the outcome of one push of PipelinedRelay.PushAll.
type PushResult struct {
	Seq uint64
	Err error
}

// Session is one receive session of a device on a relay.
type Session interface {
	// Next returns the next blob of the inbox, waiting for one.
	Next(ctx context.Context) (seq uint64, blob []byte, err error)
	// Ack deletes blob seq from the device's inbox.
	Ack(ctx context.Context, seq uint64) error
}

// The relay's refusal codes, as the broker names them (rc 10, result).
const (
	CodeTooLarge    = "TOO_LARGE"
	CodeMalformed   = "MALFORMED"
	CodeInboxFull   = "INBOX_FULL"
	CodeRateLimited = "RATE_LIMITED"
	CodeUnavailable = "UNAVAILABLE"
	CodeInternal    = "INTERNAL"
)

// RefusedError is a push the relay refused, with its code. A Relay
// implementation returns it (possibly wrapped) so that the sender can tell
// a permanent refusal, which fails the entry, from a temporary one, which
// it retries.
type RefusedError struct {
	Code string
}

func (e *RefusedError) Error() string { return "durable: push refused: " + e.Code }

// Permanent reports whether the refusal can never succeed: TOO_LARGE and
// MALFORMED.
func (e *RefusedError) Permanent() bool {
	return e.Code == CodeTooLarge || e.Code == CodeMalformed
}

// Permanent reports whether err is a permanent refusal of a push. Every
// other error (a temporary refusal, a lost connection, a timeout) leaves
// the entry queued for a retry.
func Permanent(err error) bool {
	var r *RefusedError
	return errors.As(err, &r) && r.Permanent()
}
