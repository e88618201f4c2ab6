package client

import (
	"errors"
	"fmt"

	"busbar/wire"
)

// Errors of the client itself. A call refused before anything is sent
// returns one of these (or auth.ErrBadChannel, wire.ErrBadAddress,
// wire.ErrCrossMesh for a malformed channel or target) as it is, never
// dressed as a *RequestError: see Channel.
var (
	ErrClosed      = errors.New("client: closed")
	ErrScopeClosed = errors.New("client: scope closed")
	// ErrPayloadTooLarge: a payload over the broker's limit (its welcome's
	// max_payload), refused before it is sent.
	ErrPayloadTooLarge = errors.New("client: payload too large")
	ErrHandlerExists   = errors.New("client: a request handler is already registered for this channel on this node")
	ErrIncompatible    = errors.New("client: incompatible protocol version")
	ErrAuth            = errors.New("client: authentication refused")
	// ErrRefused: the broker would not serve the connection (at
	// capacity, too many connections logging in, a hello too large); the
	// error's text says why, and a later attempt may succeed.
	ErrRefused = errors.New("client: connection refused by the broker")
	// ErrNotBroker: the peer answered, but not with a busbar broker's
	// first frame (a NATS server on that port, say).
	ErrNotBroker = errors.New("client: not a busbar broker")
)

// VersionError is a handshake refused because the broker speaks no
// protocol version this client speaks: Min..Max are the versions it
// accepts (bus.info), Have this client's (wire.ProtocolVersion). For a
// device it is the seed's relayVersionUnsupported{min, max}: nothing can
// be pushed or received until one side is upgraded, and a reconnecting
// client stops trying. errors.Is(err, ErrIncompatible) holds.
type VersionError struct {
	Min, Max int
	Have     string
	Text     string // what the broker said, if it refused the hello
}

func (e *VersionError) Error() string {
	s := fmt.Sprintf("%v: the broker speaks version %s, this client %s", ErrIncompatible, versionRange(e.Min, e.Max), e.Have)
	if e.Text != "" {
		s += " (" + e.Text + ")"
	}
	return s
}

func (e *VersionError) Unwrap() error { return ErrIncompatible }

func versionRange(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// Request error kinds (docs/messaging.md#results): a failed Request returns a *RequestError
// that matches exactly one of these with errors.Is.
var (
	ErrNoHandler     = errors.New("no handler")
	ErrOverload      = errors.New("overload")
	ErrTimeout       = errors.New("timeout")
	ErrDisconnect    = errors.New("disconnected")
	ErrRejected      = errors.New("rejected")
	ErrHandlerFailed = errors.New("handler failed")
	// ErrAmbiguous: a bare service name that several live instances
	// announce; address one as <service>.<node>.bus.
	ErrAmbiguous = errors.New("ambiguous service name")
	// ErrNotConnected and ErrProtocol are kinds only a node of an edge
	// adapter gives, for its peer (a MoonBridge backend,
	// docs/moonbridge.md): what the peer's handler needed was not
	// connected (NOT_CONNECTED), and the peer broke its protocol
	// answering (PROTOCOL_ERROR).
	ErrNotConnected = errors.New("not connected")
	ErrProtocol     = errors.New("protocol error")
)

// RequestError is a failed request: the kind, the return code and text the
// broker or the handler gave, and who said so.
type RequestError struct {
	Kind wire.Result // NO_HANDLER, OVERLOAD, TIMEOUT, DISCONNECT, REJECTED, HANDLER_FAILED, AMBIGUOUS, NOT_CONNECTED, PROTOCOL_ERROR
	RC   wire.RC
	Text string
	From string // who answered: the handler's node, or the broker
}

func (e *RequestError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("request failed: %s (rc %d)", e.Kind, e.RC)
	}
	return fmt.Sprintf("request failed: %s (rc %d): %s", e.Kind, e.RC, e.Text)
}

// Unwrap maps the kind to its sentinel.
func (e *RequestError) Unwrap() error {
	switch e.Kind {
	case wire.ResultNoHandler:
		return ErrNoHandler
	case wire.ResultOverload:
		return ErrOverload
	case wire.ResultTimeout:
		return ErrTimeout
	case wire.ResultDisconnect, wire.ResultShutdown, wire.ResultReplaced:
		return ErrDisconnect
	case wire.ResultRejected:
		return ErrRejected
	case wire.ResultAmbiguous:
		return ErrAmbiguous
	case wire.ResultNotConnected:
		return ErrNotConnected
	case wire.ResultProtocol:
		return ErrProtocol
	default:
		return ErrHandlerFailed
	}
}

// Timeout makes a timed-out request a net.Error-style timeout.
func (e *RequestError) Timeout() bool { return e.Kind == wire.ResultTimeout }

// response is what requestError reads of a response: a *wire.Message, or
// the reader's *hotpath.View (whose strings alias the read buffer).
type response interface {
	Get(key string) (string, bool)
	Value(key string) string
	Body() []byte
}

// requestError decodes a failed response.
func requestError(m response) *RequestError {
	rc := wire.ParseResponseRC(m.Get(wire.HeaderRC))
	kind := wire.Result(m.Value(wire.HeaderResult))
	if kind == "" {
		kind = wire.ResultHandler // a handler's own rc >= 10
	}
	text, ok := m.Get(wire.HeaderError)
	if !ok {
		text = string(m.Body())
	}
	return &RequestError{Kind: kind, RC: rc, Text: text, From: m.Value(wire.HeaderFrom)}
}

// HandlerError lets a handler choose the return code of its failure. Any
// other error a handler returns fails with RCError.
type HandlerError struct {
	RC   wire.RC
	Text string
}

func (e *HandlerError) Error() string { return fmt.Sprintf("rc %d: %s", e.RC, e.Text) }
