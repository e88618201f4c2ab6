package cosmix

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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
//
// As cosmix-lib-bus's parse, a message is refused only when it does not
// start with "---\n" (its text, word for word: "Bus message must start
// with '---\n', got: " and the message's first ParseErrorPrefixBytes as
// Rust's Debug writes a string), and a frame without its closing "---"
// line is all header block, with an empty body.
func Decode(text []byte) (*wire.Message, error) {
	if len(text) > MaxMessageBytes {
		return nil, &FrameError{Reason: fmt.Sprintf("%d bytes, over the limit of %d", len(text), MaxMessageBytes)}
	}
	if !bytes.HasPrefix(text, []byte(frameStart)) {
		return nil, &FrameError{Reason: "Bus message must start with '---\\n', got: " + rustDebug(prefix(text, ParseErrorPrefixBytes))}
	}
	m, err := wire.Parse(text)
	if err != nil {
		// No closing line: cosmix takes the rest as the header block, less a
		// final "\n---\n", "\n---", "---\n" or "---".
		h := text[len(frameStart):]
		for _, suffix := range []string{"\n---\n", "\n---", "---\n", "---"} {
			if t, ok := bytes.CutSuffix(h, []byte(suffix)); ok {
				h = t
				break
			}
		}
		m, err = wire.Parse(slices.Concat([]byte(frameStart), h, []byte("\n"+frameStart)))
	}
	if err != nil {
		return nil, &FrameError{Reason: strings.TrimPrefix(err.Error(), "wire: ")}
	}
	return m, nil
}

// frameStart opens every cosmix frame, and closes its header block.
const frameStart = "---\n"

// ParseErrorPrefixBytes is how much of a message that is not a frame
// noded's "Invalid Bus message" quotes: its first 40 bytes (cosmix-lib-bus
// parse_lenient). Where byte 40 falls inside a character busbar quotes up
// to that character (noded's slice would fail there and end the
// connection).
const ParseErrorPrefixBytes = 40

// prefix is text's first n bytes, less a character they would cut.
func prefix(text []byte, n int) []byte {
	if len(text) <= n {
		return text
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[:n]
}

// rustDebug is s as Rust's Debug formats a str: in double quotes, with
// \0 \t \r \n \\ \" escaped, and a character that is not printable or
// is a combining mark as \u{HEX}.
func rustDebug(s []byte) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range string(s) {
		switch r {
		case 0:
			b.WriteString(`\0`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		default:
			if !unicode.IsPrint(r) || unicode.In(r, unicode.Mn, unicode.Me) {
				fmt.Fprintf(&b, `\u{%x}`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
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
