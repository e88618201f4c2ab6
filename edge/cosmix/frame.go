package cosmix

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"busbar/wire"
)

// ErrFrame matches every frame the ingress decoder refuses.
var ErrFrame = errors.New("cosmix: not a cosmix frame")

// FrameError is a WebSocket text message that is not a cosmix frame: the
// reply is rc 10 with "Invalid Bus message: " and Reason, as noded's.
type FrameError struct {
	Reason string
}

func (e *FrameError) Error() string { return "Invalid Bus message: " + e.Reason }

// Unwrap makes errors.Is(err, ErrFrame) true.
func (e *FrameError) Unwrap() error { return ErrFrame }

// Decode reads the cosmix frame of one WebSocket text message with
// cosmix's lenient parse (wire.Parse): defective header lines are skipped,
// header lines past MaxHeaders dropped. A message that is not a frame, or
// is over MaxMessageBytes, is a *FrameError.
func Decode(text []byte) (*wire.Message, error) {
	if len(text) > MaxMessageBytes {
		return nil, &FrameError{Reason: fmt.Sprintf("%d bytes, over the limit of %d", len(text), MaxMessageBytes)}
	}
	m, err := wire.Parse(text)
	if err != nil {
		return nil, &FrameError{Reason: strings.TrimPrefix(err.Error(), "wire: ")}
	}
	return m, nil
}

// Encode is m in cosmix's text form, as its to_wire writes it: headers in
// key order between "---" lines, then the body, with a newline after a
// non-empty body that lacks one.
func Encode(m *wire.Message) []byte {
	b := m.ToBytes()
	if body := m.Body(); len(body) > 0 && body[len(body)-1] != '\n' {
		b = append(b, '\n')
	}
	return b
}

// oneLine keeps a text to one line of valid UTF-8, so it can travel in a
// header.
func oneLine(s string) string {
	return strings.ToValidUTF8(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s), "\uFFFD")
}

// response is a reply frame: type response, the rc, the error text when
// there is one, and the caller's id when it gave one (a frame without id
// gets a reply without id, as noded's).
func response(id string, rc wire.RC, errText string) *wire.Message {
	m := wire.Empty().WithHeader(wire.HeaderType, wire.TypeResponse).WithHeader(wire.HeaderRC, strconv.Itoa(int(rc)))
	if id != "" {
		m.Set(wire.HeaderID, id)
	}
	if errText != "" {
		m.Set(wire.HeaderError, oneLine(errText))
	}
	return m
}

// invalidFrame is noded's reply to a message it cannot parse: rc 10 and the
// error, nothing else (there is no id to echo).
func invalidFrame(err error) *wire.Message {
	return wire.Empty().WithHeader(wire.HeaderRC, strconv.Itoa(int(wire.RCError))).WithHeader(wire.HeaderError, oneLine(err.Error()))
}
