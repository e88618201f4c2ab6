package wire

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// View is a stream frame parsed in place, for routing without allocation:
// the header lines are checked as strictly as Decode checks them, and the
// values of the headers a router needs are kept as strings that alias the
// frame. A View and its strings are valid only while the frame's bytes are
// unchanged (for a Reader.ReadFrame buffer: until the next read);
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

var knownNames = [nKnown]string{HeaderBus, HeaderCommand, HeaderError, HeaderFrom, HeaderID, HeaderRC, HeaderReplyTo, HeaderResult, HeaderTo, HeaderTTL, HeaderType}

func knownIndex(k string) int {
	switch k {
	case HeaderBus:
		return kBus
	case HeaderCommand:
		return kCommand
	case HeaderError:
		return kError
	case HeaderFrom:
		return kFrom
	case HeaderID:
		return kID
	case HeaderRC:
		return kRC
	case HeaderReplyTo:
		return kReplyTo
	case HeaderResult:
		return kResult
	case HeaderTo:
		return kTo
	case HeaderTTL:
		return kTTL
	case HeaderType:
		return kType
	}
	return -1
}

// ParseView parses frame (a stream frame's text form, as ReadFrame returns
// it) into v with the same strict rules as Decode, without allocating for
// frames whose headers are sorted (as every writer sends them).
func ParseView(frame []byte, v *View) error {
	*v = View{frame: frame}
	if len(frame) > MaxMessageBytes {
		return &SizeError{Size: len(frame), Limit: MaxMessageBytes}
	}
	if parseViewFast(frame, v) {
		return nil
	}
	*v = View{frame: frame}
	return parseViewChecked(frame, v)
}

// parseViewFast is ParseView in one pass over the frame, for frames whose
// header keys are ASCII and sorted and whose values are not JSON (every
// frame a client of ours sends). It reports false, leaving v half-filled,
// for anything else, valid or not: parseViewChecked then decides, with
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
		if count++; count > MaxHeaders {
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
		if v.fromAt < 0 && k >= HeaderFrom {
			v.fromAt, v.fromEnd = pos, pos
			if k == HeaderFrom {
				v.fromEnd = end
			}
		}
		if v.ttlAt < 0 && k >= HeaderTTL {
			v.ttlAt, v.ttlEnd = pos, pos
			if k == HeaderTTL {
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

// parseViewChecked is ParseView line by line with every rule of Decode,
// for the frames parseViewFast leaves: it returns Decode's error.
func parseViewChecked(frame []byte, v *View) error {
	hdrEnd, bodyStart, err := split(frame)
	if err != nil {
		return err
	}
	v.hdrEnd, v.bodyStart = hdrEnd, bodyStart
	if hdrEnd <= len(delim) {
		return nil
	}
	hs := unsafe.String(&frame[len(delim)], hdrEnd-len(delim)) // read-only alias
	var (
		prev string
		seen map[string]struct{} // only once keys arrive out of order (no writer of ours does that)
	)
	for lineNo, count := 2, 0; hs != ""; lineNo++ {
		i := strings.IndexByte(hs, '\n')
		line := hs[:i]
		hs = hs[i+1:]
		if count++; count > MaxHeaders {
			return &ParseError{Line: lineNo, Kind: DefectTooManyHeaders}
		}
		k, val, d := splitLine(line)
		if d == DefectNone {
			if seen == nil && k < prev {
				seen = keysBefore(frame[len(delim):hdrEnd], count-1)
			}
			if seen != nil {
				if _, dup := seen[k]; dup {
					d = DefectDuplicate
				}
				seen[k] = struct{}{}
			} else if k == prev {
				d = DefectDuplicate
			}
		}
		if d != DefectNone {
			return &ParseError{Line: lineNo, Kind: d, Text: strings.Clone(clip(line))}
		}
		prev = k
		if ki := knownIndex(k); ki >= 0 {
			v.known[ki] = val
			v.has |= 1 << ki
		}
	}
	return nil
}

// keysBefore returns the keys of the first n header lines of block.
func keysBefore(block []byte, n int) map[string]struct{} {
	seen := make(map[string]struct{}, n+8)
	for ; n > 0; n-- {
		i := bytes.IndexByte(block, '\n')
		k, _, _ := strings.Cut(unsafe.String(unsafe.SliceData(block), i), ": ")
		seen[k] = struct{}{}
		block = block[i+1:]
	}
	return seen
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

// IsHeartbeat reports whether the frame is the empty frame.
func (v *View) IsHeartbeat() bool { return v.hdrEnd <= len(delim) && v.bodyStart >= len(v.frame) }

// Message decodes the frame into an owned Message (an allocation; for the
// paths that are not hot).
func (v *View) Message() (*Message, error) { return Decode(v.frame) }

// TTLWidth is the width of the ttl value AppendForward writes: every u32
// fits, zero-padded, so a writer can patch the remaining budget in place.
const TTLWidth = 10

// AppendForward appends v's frame as a stream frame to dst with the from
// header set to from and, when withTTL is set, a ttl header of TTLWidth
// zero digits added (or replacing the frame's own); it returns the offset
// in dst of those digits (-1 without), for PatchTTL. Other headers are copied as they are, in their order, so
// the result decodes to the same message but for from and ttl. The result
// is longer than the input by those headers: a caller forwarding a frame
// near MaxMessageBytes checks the length (FrameLen) before sending it.
func AppendForward(dst []byte, v *View, from string, withTTL bool) ([]byte, int) {
	if !v.sorted {
		return appendForwardScan(dst, v, from, withTTL)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // the length, filled in below
	dst = append(dst, v.frame[:v.fromAt]...)
	dst = appendHeader(dst, HeaderFrom, from)
	ttlOff := -1
	if withTTL {
		dst = append(dst, v.frame[v.fromEnd:v.ttlAt]...)
		dst = append(dst, HeaderTTL+": "...)
		ttlOff = len(dst)
		dst = append(dst, "0000000000\n"...)
		dst = append(dst, v.frame[v.ttlEnd:v.hdrEnd]...)
	} else {
		dst = append(dst, v.frame[v.fromEnd:v.hdrEnd]...)
	}
	dst = append(dst, delim...)
	dst = append(dst, v.frame[v.bodyStart:]...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-prefixLen))
	return dst, ttlOff
}

// appendForwardScan is AppendForward for a View whose headers arrived out
// of order: it finds the places for from and ttl line by line.
func appendForwardScan(dst []byte, v *View, from string, withTTL bool) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // the length, filled in below
	dst = append(dst, delim...)
	pending := [2]string{HeaderFrom, HeaderTTL} // inserted in key order
	n := 2
	if !withTTL {
		n = 1
	}
	next := 0
	ttlOff := -1
	insert := func(dst []byte, key string) []byte {
		if key == HeaderFrom {
			return appendHeader(dst, HeaderFrom, from)
		}
		dst = append(dst, HeaderTTL+": "...)
		ttlOff = len(dst)
		dst = append(dst, "0000000000\n"...)
		return dst
	}
	block := v.frame[len(delim):max(len(delim), v.hdrEnd)]
	for len(block) > 0 {
		i := bytes.IndexByte(block, '\n')
		line := block[:i+1]
		block = block[i+1:]
		k, _, _ := strings.Cut(unsafe.String(unsafe.SliceData(line), len(line)), ": ")
		for next < n && pending[next] < k {
			dst = insert(dst, pending[next])
			next++
		}
		if k == HeaderFrom || withTTL && k == HeaderTTL {
			continue // replaced
		}
		dst = append(dst, line...)
	}
	for ; next < n; next++ {
		dst = insert(dst, pending[next])
	}
	dst = append(dst, delim...)
	dst = append(dst, v.frame[v.bodyStart:]...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-prefixLen))
	return dst, ttlOff
}

// FrameLen is the text-form length of the stream frame at the start of b.
func FrameLen(b []byte) int { return int(binary.BigEndian.Uint32(b)) }

// PatchTTL writes ms (capped at the u32 maximum) as TTLWidth zero-padded
// digits at b[0:TTLWidth].
func PatchTTL(b []byte, ms int64) {
	ms = min(max(ms, 0), 1<<32-1)
	for i := TTLWidth - 1; i >= 0; i-- {
		b[i] = byte('0' + ms%10)
		ms /= 10
	}
}

// AppendEvent appends a stream frame with the headers command, id, a ttl
// slot (TTLWidth zeros, for PatchTTL; only when withTTL) and type, in key
// order, then body; it returns the offset of the ttl digits (-1 without). It is the allocation-free encoder
// of a client's hot path: the caller guarantees command and id are valid
// header values (a checked channel name, a generated id) — AppendEvent
// does not check them.
func AppendEvent(dst []byte, typ, command string, id []byte, body []byte, withTTL bool) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, delim...)
	dst = appendHeader(dst, HeaderCommand, command)
	dst = append(dst, HeaderID+": "...)
	dst = append(dst, id...)
	dst = append(dst, '\n')
	off := -1
	if withTTL {
		dst = append(dst, HeaderTTL+": "...)
		off = len(dst)
		dst = append(dst, "0000000000\n"...)
	}
	dst = appendHeader(dst, HeaderType, typ)
	dst = append(dst, delim...)
	dst = append(dst, body...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-prefixLen))
	return dst, off
}
