package wire

import (
	"fmt"
	"strconv"
)

// RC is an ARexx-style return code carried in the "rc" header of a
// response. The bands: below RCWarning success, from RCWarning a warning
// (the call still succeeded), from RCError an application error, from
// RCFailure a severe failure. docs/protocol.md#return-codes says how a
// peer's error is told apart from the bus's own failures.
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

// ResponseRC returns a response's return code: RCSuccess when the rc header
// is absent, and RCFailure when it is malformed or there is no response at
// all (m is nil): a response that cannot be read is not a success.
func ResponseRC(m *Message) RC {
	if m == nil {
		return RCFailure
	}
	return ParseResponseRC(m.Get(HeaderRC))
}

// ParseResponseRC is ResponseRC from a response's rc header value and
// whether the header is present, for a reader that has no Message (a
// parsed view of the frame).
func ParseResponseRC(v string, present bool) RC {
	if !present {
		return RCSuccess
	}
	rc, err := ParseRC(v)
	if err != nil {
		return RCFailure
	}
	return rc
}
