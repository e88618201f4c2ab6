package moonbridge

import (
	"errors"
	"fmt"
)

// ErrMalformed is matched by every *FrameError: bytes that are not a frame
// of this protocol. The connection that sent them is closed.
var ErrMalformed = errors.New("moonbridge: malformed frame")

// ErrFrameSize is matched by a length prefix outside 1..MaxFrameBytes,
// and by a frame too large to encode.
var ErrFrameSize = errors.New("moonbridge: frame length out of bounds")

// FrameError says what is wrong with a frame.
type FrameError struct {
	Type   byte   // the frame's type byte, 0 when unknown
	Reason string // what is wrong
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("moonbridge: malformed frame (type %d): %s", e.Type, e.Reason)
}

// Unwrap makes a *FrameError match ErrMalformed.
func (e *FrameError) Unwrap() error { return ErrMalformed }

func malformed(t byte, format string, args ...any) error {
	return &FrameError{Type: t, Reason: fmt.Sprintf(format, args...)}
}

// Refusal reasons: why a registration was refused. The connection is
// closed without a frame, the way MoonBridge's proxy refuses; the reason
// is logged once, without the secret.
var (
	ErrVersion        = errors.New("moonbridge: unsupported protocol version")
	ErrUnknownKey     = errors.New("moonbridge: unknown key id")
	ErrBadSignature   = errors.New("moonbridge: registration signature does not verify")
	ErrNameNotAllowed = errors.New("moonbridge: backend name not allowed for this key")
	ErrDuplicate      = errors.New("moonbridge: backend name already registered by another instance")
	ErrAddress        = errors.New("moonbridge: advertised game address refused")
	ErrRegistration   = errors.New("moonbridge: registration refused")
)
