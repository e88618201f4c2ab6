package port

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

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

// readAll reads r to its end, at most limit bytes (more is errTooLarge),
// into a buffer that starts at firstRead bytes and doubles up to limit,
// taking each growth from budget first, with the old buffer still counted
// while it is copied (errNoMemory when it cannot). It returns what it
// read and the bytes it holds from budget, to give back once the data is
// no longer needed (even on an error).
func readAll(r io.Reader, limit int, budget *byteBudget) (data []byte, held int64, err error) {
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if len(buf) == limit { // full: only the end of the stream may follow
				var probe [1]byte
				n, rerr := io.ReadFull(r, probe[:])
				switch {
				case n > 0:
					return nil, held, errTooLarge{limit}
				case rerr == io.EOF:
					return buf, held, nil
				default:
					return buf, held, rerr
				}
			}
			grown := min(max(2*cap(buf), firstRead), limit)
			if !budget.take(int64(grown)) {
				return nil, held, errNoMemory
			}
			nb := make([]byte, len(buf), grown)
			copy(nb, buf)
			budget.give(int64(cap(buf))) // the old buffer is garbage now
			held += int64(grown - cap(buf))
			buf = nb
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case rerr == io.EOF:
			return buf, held, nil
		case rerr != nil:
			return buf, held, rerr
		}
	}
}

// errNoMemory: the requests being read hold MaxRequestMemory already.
var errNoMemory = errors.New("port: the requests being read hold MaxRequestMemory")

// byteBudget is a count of bytes that may still be taken.
type byteBudget struct{ left atomic.Int64 }

func (b *byteBudget) take(n int64) bool {
	if b.left.Add(-n) < 0 {
		b.left.Add(n)
		return false
	}
	return true
}

func (b *byteBudget) give(n int64) { b.left.Add(n) }
