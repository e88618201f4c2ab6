package client

import (
	"strconv"
	"testing"

	"busbar/internal/hotpath"
)

// ttlEdges are ttl header values at and just past parseTTL's edges.
var ttlEdges = []string{
	"", "0", "7", "1000", "4294967295", "4294967296", "00000000004294967295", "99999999999999999999999",
	"-1", "+1", "1_000", "0x10", "1a", " 1", "1 ", "١",
	// TTLWidth digits, as brokers stamp them: every position at a digit's
	// edges ('/' and ':' are the bytes around '0' and '9').
	"0000000000", "0000030000", "4294967295", "4294967296", "9999999999", "0000000001",
	"/000000000", "000000000/", "000000000:", "0000:00000", "00000/0000", "4294967 95", "429496729\xff",
}

func TestTTLParsesAsParseUint(t *testing.T) {
	for _, v := range ttlEdges {
		checkTTL(t, v)
	}
	// Every byte value at every position of a TTLWidth value.
	for i := range hotpath.TTLWidth {
		for c := range 256 {
			b := []byte("1234567890")
			b[i] = byte(c)
			checkTTL(t, string(b))
		}
	}
}

func BenchmarkParseTTL(b *testing.B) {
	for _, v := range []string{"0000030000", "30000"} {
		b.Run(v, func(b *testing.B) {
			for b.Loop() {
				parseTTL(v)
			}
		})
	}
}

func FuzzTTL(f *testing.F) {
	for _, v := range ttlEdges {
		f.Add(v)
	}
	f.Fuzz(checkTTL)
}

// checkTTL holds parseTTL to strconv.ParseUint(v, 10, 32)'s verdict and value.
func checkTTL(t *testing.T, v string) {
	want, err := strconv.ParseUint(v, 10, 32)
	got, ok := parseTTL(v)
	if ok != (err == nil) || (ok && got != want) {
		t.Errorf("parseTTL(%q) = %d, %v; ParseUint: %d, %v", v, got, ok, want, err)
	}
}
