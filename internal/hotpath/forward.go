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
// Every message a writer sends is stamped, so the last eight digits are
// made in one word and stored at once: the value split into two halves
// of four digits, each half into two pairs, each pair into two digits,
// with multiplies by reciprocals that are exact in these ranges; the
// first two come from a table. A digit per signed division was 208
// instructions a message in a client's writer (cachegrind) and 19–29 ns
// in BenchmarkPatchTTL, two per unsigned division 12 ns and ~137
// instructions.
func PatchTTL(b []byte, ms int64) {
	u := uint64(min(max(ms, 0), 1<<32-1))
	_ = b[TTLWidth-1]
	top := 2 * (u / 100_000_000) // at most 42
	b[0], b[1] = twoDigits[top], twoDigits[top+1]
	binary.LittleEndian.PutUint64(b[2:], eightDigits(u%100_000_000))
}

// eightDigits is v (below 10^8) as eight ASCII digits in a word, the
// first digit in its lowest byte (a little-endian store writes them in
// order).
func eightDigits(v uint64) uint64 {
	x := v/10_000 | (v%10_000)<<32 // two lanes of 32 bits, below 10^4 each
	// Each lane /100: (n*5243)>>19 is n/100 for n < 43,699.
	q := (x * 5243 >> 19) & 0x0000007F_0000007F
	x = q | (x-q*100)<<16 // four lanes of 16 bits, below 100 each
	// Each lane /10: (n*103)>>10 is n/10 for n < 179.
	q = (x * 103 >> 10) & 0x000F000F_000F000F
	x = q | (x-q*10)<<8 // eight bytes, a digit each
	return x | 0x30303030_30303030
}

// twoDigits is 00 to 99, two bytes each.
const twoDigits = "0001020304050607080910111213141516171819" +
	"2021222324252627282930313233343536373839" +
	"4041424344454647484950515253545556575859" +
	"6061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"
