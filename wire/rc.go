package wire

import (
	"errors"
	"fmt"
	"strconv"
)

// RC is an ARexx-style return code carried in the "rc" header of a
// response. The bands: below RCWarning success, from RCWarning a warning
// (the call still succeeded), from RCError an application error, from
// RCFailure a severe failure.
type RC uint8

// The return-code bands (RC_SUCCESS, RC_WARNING, RC_ERROR, RC_FAILURE).
const (
	RCSuccess RC = 0
	RCWarning RC = 5
	RCError   RC = 10
	RCFailure RC = 20
)

// IsError reports whether rc is in the error bands (rc >= RCError).
func (rc RC) IsError() bool { return rc >= RCError }

// ParseRC parses an "rc" header value: a decimal u8.
func ParseRC(s string) (RC, error) {
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("wire: rc %q is not a number from 0 to 255", s)
	}
	return RC(n), nil
}

// AppError is a peer's answer that the call failed: the response arrived
// with rc >= RCError. The operation reached the peer, which said no.
type AppError struct {
	RC   RC
	Text string // the "error" header, else the body
}

func (e *AppError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("peer error rc=%d", e.RC)
	}
	return fmt.Sprintf("peer error rc=%d: %s", e.RC, e.Text)
}

// TransportError means no response arrived: the peer may or may not have
// executed the call (seed 003: a timeout proves nothing either way).
type TransportError struct {
	Err error
}

func (e *TransportError) Error() string { return "transport failure: " + e.Err.Error() }

// Unwrap exposes the cause, so errors.Is(err, context.DeadlineExceeded)
// and similar checks work.
func (e *TransportError) Unwrap() error { return e.Err }

// Reply is the outcome of a call (seed 004's PortReply): either a response
// message, possibly carrying an application error, or a transport failure.
// The two never mix: Msg is nil exactly when Err is set.
type Reply struct {
	Msg *Message // the response, nil on transport failure
	Err error    // why no response arrived, nil when one did
}

// NewReply builds a Reply from what a transport returned.
func NewReply(msg *Message, err error) Reply {
	if err != nil {
		return Reply{Err: err}
	}
	if msg == nil {
		return Reply{Err: errors.New("wire: no response message")}
	}
	return Reply{Msg: msg}
}

// RC returns the response's return code: RCSuccess when the header is
// absent, RCFailure when it is malformed (a response we cannot read is not a
// success), and RCFailure on transport failure.
func (r Reply) RC() RC {
	if r.Msg == nil {
		return RCFailure
	}
	v, ok := r.Msg.Get(HeaderRC)
	if !ok {
		return RCSuccess
	}
	rc, err := ParseRC(v)
	if err != nil {
		return RCFailure
	}
	return rc
}

// AppError returns the peer's application error, or nil when the peer
// answered with rc < RCError or no answer arrived.
func (r Reply) AppError() *AppError {
	if r.Msg == nil {
		return nil
	}
	rc := r.RC()
	if !rc.IsError() {
		return nil
	}
	text, ok := r.Msg.Get(HeaderError)
	if !ok {
		text = string(r.Msg.Body())
	}
	if v := r.Msg.Value(HeaderRC); v != "" {
		if _, err := ParseRC(v); err != nil {
			text = fmt.Sprintf("malformed rc header %q: %s", v, text)
		}
	}
	return &AppError{RC: rc, Text: text}
}

// Result collapses the reply to Go's usual pair: the response, or an error
// that is a *TransportError (never reached the peer, or no answer) or an
// *AppError (the peer said no). errors.As tells them apart.
func (r Reply) Result() (*Message, error) {
	if r.Err != nil {
		if _, ok := errors.AsType[*TransportError](r.Err); ok {
			return nil, r.Err
		}
		return nil, &TransportError{Err: r.Err}
	}
	if ae := r.AppError(); ae != nil {
		return r.Msg, ae
	}
	return r.Msg, nil
}
