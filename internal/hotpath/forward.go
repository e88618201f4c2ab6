package hotpath

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unsafe"

	"busbar/wire"
)

// TTLWidth is the width of the ttl value AppendForward and AppendEvent
// write: every u32 fits, zero-padded, so a writer can patch the remaining
// budget in place (docs/messaging.md#deadlines).
const TTLWidth = 10

// ttlSlot is a ttl value of TTLWidth zeros and its line's newline.
const ttlSlot = "0000000000\n"

// AppendForward appends v's frame as a stream frame to dst with the from
// header set to from and, when withTTL is set, a ttl header of TTLWidth
// zero digits added (or replacing the frame's own); it returns the offset
// in dst of those digits (-1 without), for PatchTTL. Other headers are
// copied as they are, in their order, so the result decodes to the same
// message but for from and ttl. The result is longer than the input by
// those headers: a caller forwarding a frame near wire.MaxMessageBytes
// checks the length (FrameLen) before sending it.
func AppendForward(dst []byte, v *View, from string, withTTL bool) ([]byte, int) {
	if !v.sorted {
		return appendForwardScan(dst, v, from, withTTL)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // the length, filled in below
	dst = append(dst, v.frame[:v.fromAt]...)
	dst = appendHeader(dst, wire.HeaderFrom, from)
	ttlOff := -1
	if withTTL {
		dst = append(dst, v.frame[v.fromEnd:v.ttlAt]...)
		dst = append(dst, wire.HeaderTTL+": "...)
		ttlOff = len(dst)
		dst = append(dst, ttlSlot...)
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
	pending := [2]string{wire.HeaderFrom, wire.HeaderTTL} // inserted in key order
	n := 2
	if !withTTL {
		n = 1
	}
	next := 0
	ttlOff := -1
	insert := func(dst []byte, key string) []byte {
		if key == wire.HeaderFrom {
			return appendHeader(dst, wire.HeaderFrom, from)
		}
		dst = append(dst, wire.HeaderTTL+": "...)
		ttlOff = len(dst)
		dst = append(dst, ttlSlot...)
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
		if k == wire.HeaderFrom || withTTL && k == wire.HeaderTTL {
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

func appendHeader(dst []byte, k, v string) []byte {
	dst = append(dst, k...)
	dst = append(dst, ": "...)
	dst = append(dst, v...)
	return append(dst, '\n')
}

// FrameLen is the text-form length of the stream frame at the start of b
// (its length prefix).
func FrameLen(b []byte) int { return int(binary.BigEndian.Uint32(b)) }

// PatchTTL writes ms (capped at the u32 maximum) as TTLWidth zero-padded
// digits at b[0:TTLWidth].
//
// Every message a writer sends is stamped, so it writes two digits per
// division (unsigned, which compiles to a multiply) and pads with zeros
// once the value is spent. A digit per signed division was 208
// instructions a message in a client's writer (cachegrind) and 19–29 ns
// in BenchmarkPatchTTL, now 12 ns.
func PatchTTL(b []byte, ms int64) {
	u := uint64(min(max(ms, 0), 1<<32-1))
	_ = b[TTLWidth-1]
	i := TTLWidth
	for u >= 10 {
		q := u / 100
		r := 2 * (u - q*100)
		i -= 2
		b[i], b[i+1] = twoDigits[r], twoDigits[r+1]
		u = q
	}
	if u > 0 {
		i--
		b[i] = byte('0' + u)
	}
	for i > 0 {
		i--
		b[i] = '0'
	}
}

// twoDigits is 00 to 99, two bytes each.
const twoDigits = "0001020304050607080910111213141516171819" +
	"2021222324252627282930313233343536373839" +
	"4041424344454647484950515253545556575859" +
	"6061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"
