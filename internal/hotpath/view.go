package hotpath

import (
	"bytes"
	"unicode/utf8"
	"unsafe"

	"busbar/wire"
)

// delim opens and closes a frame's header block; prefixLen is the stream
// length prefix (docs/protocol.md#stream-framing).
const (
	delim     = "---\n"
	prefixLen = 4
)

// View is a stream frame parsed in place, for routing without allocation:
// the header lines are checked as strictly as wire.Decode checks them, and
// the values of the headers a router needs are kept as strings that alias
// the frame. A View and its strings are valid only while the frame's bytes
// are unchanged (for a wire.Reader.ReadFrame buffer: until the next read);
// strings.Clone what must outlive it.
type View struct {
	frame     []byte // the text form
	hdrEnd    int    // end of the header block
	bodyStart int
	known     [nKnown]string
	has       uint16 // bit i: known[i] present

	// Where AppendForward puts from and ttl, set when the headers arrived
	// sorted (as every writer sends them): the line of that key, or an
	// empty span where it would be inserted. Without them (sorted false)
	// AppendForward scans the header block.
	sorted          bool
	fromAt, fromEnd int
	ttlAt, ttlEnd   int
}

// The headers a View keeps.
const (
	kBus = iota
	kCommand
	kError
	kFrom
	kID
	kRC
	kReplyTo
	kResult
	kTo
	kTTL
	kType
	nKnown
)

var knownNames = [nKnown]string{wire.HeaderBus, wire.HeaderCommand, wire.HeaderError, wire.HeaderFrom, wire.HeaderID, wire.HeaderRC, wire.HeaderReplyTo, wire.HeaderResult, wire.HeaderTo, wire.HeaderTTL, wire.HeaderType}

func knownIndex(k string) int {
	switch k {
	case wire.HeaderBus:
		return kBus
	case wire.HeaderCommand:
		return kCommand
	case wire.HeaderError:
		return kError
	case wire.HeaderFrom:
		return kFrom
	case wire.HeaderID:
		return kID
	case wire.HeaderRC:
		return kRC
	case wire.HeaderReplyTo:
		return kReplyTo
	case wire.HeaderResult:
		return kResult
	case wire.HeaderTo:
		return kTo
	case wire.HeaderTTL:
		return kTTL
	case wire.HeaderType:
		return kType
	}
	return -1
}

// ParseView parses frame (a stream frame's text form, as ReadFrame returns
// it) into v with the same strict rules as wire.Decode, without allocating
// for frames whose header keys are ASCII and sorted and whose values are
// not JSON (every frame a busbar writer sends).
func ParseView(frame []byte, v *View) error {
	*v = View{frame: frame}
	if len(frame) > wire.MaxMessageBytes {
		return &wire.SizeError{Size: len(frame), Limit: wire.MaxMessageBytes}
	}
	if parseViewFast(frame, v) {
		return nil
	}
	*v = View{frame: frame}
	return parseViewDecoded(frame, v)
}

// parseViewFast is ParseView in one pass over the frame, for frames whose
// header keys are ASCII and sorted and whose values are not JSON (every
// frame a client of ours sends). It reports false, leaving v half-filled,
// for anything else, valid or not: parseViewDecoded then decides, with
// Decode's exact verdict.
func parseViewFast(f []byte, v *View) bool {
	if len(f) < 7 || string(f[:len(delim)]) != delim {
		return false
	}
	v.fromAt, v.ttlAt = -1, -1
	prev := ""
	for pos, count := len(delim), 0; ; {
		nl := bytes.IndexByte(f[pos:], '\n')
		if nl < 0 { // the closing line may end the frame
			if len(f)-pos != 3 || string(f[pos:]) != "---" {
				return false
			}
			v.hdrEnd, v.bodyStart = pos, len(f)
			break
		}
		line := f[pos : pos+nl]
		if nl == 3 && string(line) == "---" {
			v.hdrEnd, v.bodyStart = pos, pos+len(delim)
			break
		}
		if count++; count > wire.MaxHeaders {
			return false
		}
		i := 0
		for i < len(line) && line[i] > ' ' && line[i] < 0x7f && line[i] != ':' {
			i++
		}
		if i == 0 || i+1 >= len(line) || line[i] != ':' || line[i+1] != ' ' {
			return false
		}
		k := unsafe.String(&line[0], i) // read-only alias
		val := ""
		if i+2 < len(line) {
			if c := line[i+2]; c == '[' || c == '{' { // JSON values are checked by the slow path
				return false
			}
			val = unsafe.String(&line[i+2], len(line)-i-2)
			if !utf8.ValidString(val) {
				return false
			}
		}
		if k <= prev { // out of order or duplicate
			return false
		}
		prev = k
		end := pos + nl + 1
		if v.fromAt < 0 && k >= wire.HeaderFrom {
			v.fromAt, v.fromEnd = pos, pos
			if k == wire.HeaderFrom {
				v.fromEnd = end
			}
		}
		if v.ttlAt < 0 && k >= wire.HeaderTTL {
			v.ttlAt, v.ttlEnd = pos, pos
			if k == wire.HeaderTTL {
				v.ttlEnd = end
			}
		}
		if ki := knownIndex(k); ki >= 0 {
			v.known[ki] = val
			v.has |= 1 << ki
		}
		pos = end
	}
	if v.fromAt < 0 {
		v.fromAt, v.fromEnd = v.hdrEnd, v.hdrEnd
	}
	if v.ttlAt < 0 {
		v.ttlAt, v.ttlEnd = v.hdrEnd, v.hdrEnd
	}
	v.sorted = true
	return true
}

// parseViewDecoded is ParseView for the frames parseViewFast leaves
// (unsorted or non-ASCII keys, JSON values, and every invalid frame):
// wire.Decode itself gives the verdict, so the rules live in one place.
// It costs a copy of the frame, on frames no busbar writer sends. The
// kept values alias that copy, which outlives the frame.
func parseViewDecoded(frame []byte, v *View) error {
	m, err := wire.Decode(frame)
	if err != nil {
		return err
	}
	for i, k := range knownNames {
		if s, ok := m.Get(k); ok {
			v.known[i] = s
			v.has |= 1 << i
		}
	}
	// Decode accepted the frame, so it has both delimiters; the body
	// starts after the first closing line, as Decode found it.
	if i := bytes.Index(frame[3:], []byte("\n"+delim)); i >= 0 {
		v.hdrEnd = 3 + i + 1
		v.bodyStart = v.hdrEnd + len(delim)
	} else { // a final "---" without a newline
		v.hdrEnd, v.bodyStart = len(frame)-3, len(frame)
	}
	return nil
}

func (v *View) get(i int) (string, bool) { return v.known[i], v.has&(1<<i) != 0 }

// Get returns a header a View keeps (bus, command, error, from, id, rc,
// reply-to, result, to, ttl, type); other keys report absent.
func (v *View) Get(key string) (string, bool) {
	if i := knownIndex(key); i >= 0 {
		return v.get(i)
	}
	return "", false
}

// Value is Get without the presence flag.
func (v *View) Value(key string) string {
	s, _ := v.Get(key)
	return s
}

// Body is the frame's body, byte-exact. It aliases the frame.
func (v *View) Body() []byte { return v.frame[v.bodyStart:] }

// Len is the length of the whole frame, headers included.
func (v *View) Len() int { return len(v.frame) }

// IsHeartbeat reports whether the frame is the empty frame.
func (v *View) IsHeartbeat() bool { return v.hdrEnd <= len(delim) && v.bodyStart >= len(v.frame) }

// Message decodes the frame into an owned wire.Message (an allocation;
// for the paths that are not hot).
func (v *View) Message() (*wire.Message, error) { return wire.Decode(v.frame) }
