package moonbridge

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// UUID is a MoonBridge message id (java.util.UUID: two big-endian i64).
type UUID [16]byte

// NewUUID returns a random (version 4) UUID.
func NewUUID() UUID {
	var u UUID
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// String is the canonical form, 8-4-4-4-12 lower-case hex digits.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// ErrBadUUID is returned by ParseUUID for anything but the canonical form.
var ErrBadUUID = errors.New("moonbridge: not a UUID in 8-4-4-4-12 hex form")

// ParseUUID parses the canonical form (either case).
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, ErrBadUUID
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, ErrBadUUID
	}
	return u, nil
}

// Endpoint is a MoonBridge node: the proxy, or a backend by name.
type Endpoint struct {
	Proxy   bool
	Backend string // empty for the proxy
}

// ProxyEndpoint is the proxy.
func ProxyEndpoint() Endpoint { return Endpoint{Proxy: true} }

// BackendEndpoint is the backend named name.
func BackendEndpoint(name string) Endpoint { return Endpoint{Backend: name} }

func (e Endpoint) String() string {
	if e.Proxy {
		return "proxy"
	}
	return "backend(" + e.Backend + ")"
}

// Kind is a message's kind.
type Kind byte

// The message kinds.
const (
	KindEvent   Kind = 1
	KindRequest Kind = 2
	KindReply   Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindEvent:
		return "EVENT"
	case KindRequest:
		return "REQUEST"
	case KindReply:
		return "REPLY"
	}
	return fmt.Sprintf("Kind(%d)", byte(k))
}

// Message is MoonBridge's immutable envelope. Target is nil only for a
// publication; ReplyTo is set exactly for a reply.
type Message struct {
	ID      UUID
	Kind    Kind
	Channel string
	Source  Endpoint
	Target  *Endpoint
	ReplyTo *UUID
	Payload []byte
}

// SendResult is a delivery status for one destination (MoonBridge's
// SendResult; the numbers are its wire codes).
type SendResult byte

// The send results.
const (
	Accepted      SendResult = 1
	NoSubscriber  SendResult = 2
	NotConnected  SendResult = 3
	Backpressured SendResult = 4
	Rejected      SendResult = 5
	TimedOut      SendResult = 6
	Failed        SendResult = 7
)

var sendResultNames = [...]string{"", "ACCEPTED", "NO_SUBSCRIBER", "NOT_CONNECTED", "BACKPRESSURED", "REJECTED", "TIMED_OUT", "FAILED"}

func (r SendResult) String() string {
	if r >= Accepted && r <= Failed {
		return sendResultNames[r]
	}
	return fmt.Sprintf("SendResult(%d)", byte(r))
}

// ErrorCode is a failed operation's category (MoonBridge's
// MessagingException.Code; the numbers are its wire codes).
type ErrorCode byte

// The error codes.
const (
	CodeNotConnected  ErrorCode = 1
	CodeNoHandler     ErrorCode = 2
	CodeBackpressured ErrorCode = 3
	CodeTimedOut      ErrorCode = 4
	CodeClosed        ErrorCode = 5
	CodeRejected      ErrorCode = 6
	CodeHandlerFailed ErrorCode = 7
	CodeProtocolError ErrorCode = 8
)

var codeNames = [...]string{"", "NOT_CONNECTED", "NO_HANDLER", "BACKPRESSURED", "TIMED_OUT", "CLOSED", "REJECTED", "HANDLER_FAILED", "PROTOCOL_ERROR"}

func (c ErrorCode) String() string {
	if c >= CodeNotConnected && c <= CodeProtocolError {
		return codeNames[c]
	}
	return fmt.Sprintf("ErrorCode(%d)", byte(c))
}

// Error is a failed operation as a RESPONSE carries it.
type Error struct {
	Code   ErrorCode
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "moonbridge: " + e.Code.String()
	}
	return "moonbridge: " + e.Code.String() + ": " + e.Detail
}

// Hello is the proxy's first frame.
type Hello struct {
	Version int32
	Nonce   [NonceBytes]byte
}

// Register is the backend's registration.
type Register struct {
	InstanceID, Name, Address, Generation, KeyID string
	Signature                                    [SignatureBytes]byte
}

// Registered accepts a registration.
type Registered struct {
	Epoch      int64 // the backend's epoch, ≥ 0
	ProxyEpoch UUID  // changes when the proxy (here: the broker) restarts
}

// MessageFrame carries an event or a request for one hop.
type MessageFrame struct {
	OperationID   int64 // > 0, the hop's correlation
	TimeoutMillis int64 // MinTimeoutMillis..MaxTimeoutMillis
	Message       Message
}

// ResponseType says what a RESPONSE carries.
type ResponseType byte

// The response types.
const (
	ResponseSend    ResponseType = 1
	ResponseReply   ResponseType = 2
	ResponsePublish ResponseType = 3
	ResponseError   ResponseType = 4
)

// NodeResult is one candidate's result in a publication.
type NodeResult struct {
	Endpoint Endpoint
	Result   SendResult
}

// Response answers a MESSAGE: the field its Type names is set.
type Response struct {
	OperationID int64
	Type        ResponseType
	Result      SendResult   // ResponseSend
	Reply       *Message     // ResponseReply
	MessageID   UUID         // ResponsePublish
	Results     []NodeResult // ResponsePublish, in order
	Err         Error        // ResponseError
}
