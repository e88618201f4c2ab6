package hotpath

import (
	"bytes"
	"encoding/binary"
	"math/bits"
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
	known     [nKnown + 1]string // known[nKnown] stays empty: Get's slot for other keys
	has       uint16             // bit i: known[i] present
	others    bool               // a header not kept was there

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

// knownIndex is the index of a header a View keeps, or nKnown for any
// other key. It and Get are small enough to inline, so that a Get of a
// constant key folds to a load.
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
	return nKnown
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
//
// Each byte of the header block is read once: keyAt recognises a key the
// View keeps, with its ": ", by the line's first word (other keys are
// checked byte by byte), and lineEnd finds the value's newline and tells
// whether the value is ASCII (then it is valid UTF-8 without
// utf8.ValidString). Kept keys are ordered by their index, others by a
// comparison that the first byte usually decides.
func parseViewFast(f []byte, v *View) bool {
	if len(f) < 7 || string(f[:len(delim)]) != delim {
		return false
	}
	v.fromAt, v.ttlAt = -1, -1
	prev, prevKi := "", -1
	for pos, count := len(delim), 0; ; {
		w := wordAt(f, pos)
		if uint32(w) == wDelim && len(f)-pos >= len(delim) {
			v.hdrEnd, v.bodyStart = pos, pos+len(delim)
			break
		} else if w == wDelim&mask3 && len(f)-pos == 3 { // the closing line may end the frame
			v.hdrEnd, v.bodyStart = pos, len(f)
			break
		}
		if count++; count > wire.MaxHeaders {
			return false
		}
		ki, klen := keyAt(w, f, pos)
		if ki < 0 {
			klen = keyLen(f[pos:])
			if klen == 0 || pos+klen+1 >= len(f) || f[pos+klen] != ':' || f[pos+klen+1] != ' ' {
				return false
			}
		}
		k := unsafe.String(&f[pos], klen) // read-only alias
		vs := pos + klen + 2
		nl, ascii := lineEnd(f, vs)
		if nl < 0 {
			return false // no closing line
		}
		val := ""
		if nl > vs {
			if c := f[vs]; c == '[' || c == '{' { // JSON values are checked by the slow path
				return false
			}
			val = unsafe.String(&f[vs], nl-vs)
			if !ascii && !utf8.ValidString(val) {
				return false
			}
		}
		if ki >= 0 && prevKi >= 0 {
			if ki <= prevKi {
				return false
			}
		} else if prev != "" && k[0] <= prev[0] && (k[0] < prev[0] || k <= prev) { // out of order or duplicate
			return false
		}
		prev, prevKi = k, ki
		end := nl + 1
		if v.fromAt < 0 && (ki >= kFrom || ki < 0 && atOrAfter(k, wire.HeaderFrom)) {
			v.fromAt, v.fromEnd = pos, pos
			if ki == kFrom {
				v.fromEnd = end
			}
		}
		if v.ttlAt < 0 && (ki >= kTTL || ki < 0 && atOrAfter(k, wire.HeaderTTL)) {
			v.ttlAt, v.ttlEnd = pos, pos
			if ki == kTTL {
				v.ttlEnd = end
			}
		}
		if ki >= 0 {
			v.known[ki] = val
			v.has |= 1 << ki
		} else {
			v.others = true
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

// atOrAfter reports k >= key, deciding on the first byte when it can.
func atOrAfter(k, key string) bool {
	return k[0] > key[0] || k[0] == key[0] && k >= key
}

// Words of eight bytes, for lineEnd.
const (
	lsbs     = 0x0101010101010101
	msbs     = 0x8080808080808080
	newlines = '\n' * lsbs
)

// lineEnd returns the index of the first newline in f at or after p (-1
// when there is none) and whether the bytes from p to it are all ASCII. It
// reads eight bytes at a time: header lines are short, and a call to
// bytes.IndexByte then utf8.ValidString cost more than the line.
func lineEnd(f []byte, p int) (int, bool) {
	var high uint64
	b := f[p:]
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		x := w ^ newlines
		// The lowest bit set marks the first zero byte of x exactly (a
		// borrow only runs upwards from a zero byte): the first newline.
		if z := (x - lsbs) &^ x & msbs; z != 0 {
			n := uint(bits.TrailingZeros64(z)) >> 3
			high |= w & msbs & (1<<(8*n) - 1)
			return len(f) - len(b) + int(n), high == 0
		}
		high |= w & msbs
		b = b[8:]
	}
	for i, c := range b {
		if c == '\n' {
			return len(f) - len(b) + i, high == 0
		}
		high |= uint64(c & 0x80)
	}
	return -1, high == 0
}

// keyByte[c] is whether c may be in a key on the fast path: printable
// ASCII but the colon (other keys are Decode's to judge).
var keyByte = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = c != ':'
	}
	return t
}()

// keyLen is the length of line's key on the fast path: the run of keyByte
// bytes it starts with.
func keyLen(line []byte) int {
	i := 0
	for i < len(line) && keyByte[line[i]] {
		i++
	}
	return i
}

// wordAt is the eight bytes at f[pos:] as a little-endian word,
// zero-padded past the frame's end.
func wordAt(f []byte, pos int) uint64 {
	if pos+8 <= len(f) {
		return binary.LittleEndian.Uint64(f[pos:])
	}
	var w uint64
	for i := len(f) - 1; i >= pos; i-- {
		w = w<<8 | uint64(f[i])
	}
	return w
}

// keyAt recognises the keys a View keeps, with their ": ", by w, the first
// eight bytes at f[pos:] (wordAt), and returns the key's index and length,
// or -1 for any other key. The bytes it matches hold no newline, so a
// match lies within the line.
func keyAt(w uint64, f []byte, pos int) (ki, klen int) {
	switch byte(w) {
	case 'b':
		if w&mask5 == wBus {
			return kBus, 3
		}
	case 'c':
		if w == wCommand && pos+8 < len(f) && f[pos+8] == ' ' {
			return kCommand, 7
		}
	case 'e':
		if w&mask7 == wError {
			return kError, 5
		}
	case 'f':
		if w&mask6 == wFrom {
			return kFrom, 4
		}
	case 'i':
		if w&mask4 == wID {
			return kID, 2
		}
	case 'r':
		switch {
		case w&mask4 == wRC:
			return kRC, 2
		case w == wResult:
			return kResult, 6
		case w == wReplyTo && pos+9 < len(f) && f[pos+8] == ':' && f[pos+9] == ' ':
			return kReplyTo, 8
		}
	case 't':
		switch {
		case w&mask4 == wTo:
			return kTo, 2
		case w&mask5 == wTTL:
			return kTTL, 3
		case w&mask6 == wType:
			return kType, 4
		}
	}
	return -1, 0
}

// Masks of a word's first n bytes, for keyAt and the closing line.
const (
	mask3 = 1<<24 - 1
	mask4 = 1<<32 - 1
	mask5 = 1<<40 - 1
	mask6 = 1<<48 - 1
	mask7 = 1<<56 - 1
)

// The first bytes of the lines keyAt recognises, as little-endian words,
// zero-padded (TestKeyWords checks them).
const (
	wDelim   = 0x0a2d2d2d         // "---\n"
	wBus     = 0x000000203a737562 // "bus: "
	wCommand = 0x3a646e616d6d6f63 // "command:"
	wError   = 0x00203a726f727265 // "error: "
	wFrom    = 0x0000203a6d6f7266 // "from: "
	wID      = 0x00000000203a6469 // "id: "
	wRC      = 0x00000000203a6372 // "rc: "
	wResult  = 0x203a746c75736572 // "result: "
	wReplyTo = 0x6f742d796c706572 // "reply-to"
	wTo      = 0x00000000203a6f74 // "to: "
	wTTL     = 0x000000203a6c7474 // "ttl: "
	wType    = 0x0000203a65707974 // "type: "
)

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
	kept := 0
	for i, k := range knownNames {
		if s, ok := m.Get(k); ok {
			v.known[i] = s
			v.has |= 1 << i
			kept++
		}
	}
	v.others = m.Len() > kept
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

// Get returns a header a View keeps (bus, command, error, from, id, rc,
// reply-to, result, to, ttl, type); other keys report absent.
func (v *View) Get(key string) (string, bool) {
	i := knownIndex(key)
	return v.known[i], v.has&(1<<i) != 0
}

// Others reports whether the frame has a header a View does not keep, so
// a router looks for one of those only in the frames that have any.
func (v *View) Others() bool { return v.others }

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
