package port

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"busbar/wire"
)

// Reply is a port's answer: its rc, the "error" header (an application
// error's text, or a warning's), and the JSON body (nil when there is
// none).
type Reply struct {
	RC    wire.RC
	Error string
	Body  json.RawMessage
}

// encode writes m in cosmix's text form: wire's text form, plus a newline
// after a non-empty body that lacks one (cosmix's to_wire adds it).
func encode(m *wire.Message) []byte {
	b := m.ToBytes()
	if body := m.Body(); len(body) > 0 && body[len(body)-1] != '\n' {
		b = append(b, '\n')
	}
	return b
}

// encodeRequest is the request frame: the command header, and the JSON
// arguments as the body unless they are absent or null.
func encodeRequest(command string, args json.RawMessage) ([]byte, error) {
	m := wire.Empty().WithHeader(wire.HeaderCommand, command)
	if len(args) > 0 && string(args) != "null" {
		m.SetBody(args)
	}
	if err := m.Check(); err != nil {
		return nil, fmt.Errorf("port: command %q cannot travel in a header: %w", command, err)
	}
	return encode(m), nil
}

// encodeReply is the reply frame: rc, error when there is one, the body.
func encodeReply(r Reply) []byte {
	m := wire.Empty().WithHeader(wire.HeaderRC, strconv.Itoa(int(r.RC)))
	if r.Error != "" {
		m.Set(wire.HeaderError, oneLine(r.Error))
	}
	m.SetBody(r.Body)
	return encode(m)
}

// oneLine keeps a text to one line of valid UTF-8, so it can travel in a
// header.
func oneLine(s string) string {
	return strings.ToValidUTF8(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s), "\uFFFD")
}

// marshal encodes v as cosmix's serde_json does: compact, without Go's
// escaping of <, > and &.
func marshal(v any) (json.RawMessage, error) { return wire.JSON(v) }

// errTooLarge: a frame over its limit.
type errTooLarge struct{ limit int }

func (e errTooLarge) Error() string { return fmt.Sprintf("larger than %d bytes", e.limit) }

// readAll reads r to its end, refusing more than limit bytes without
// reading much past them.
func readAll(r io.Reader, limit int) ([]byte, error) {
	var b bytes.Buffer
	n, err := b.ReadFrom(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return b.Bytes(), err
	}
	if n > int64(limit) {
		return nil, errTooLarge{limit}
	}
	return b.Bytes(), nil
}
