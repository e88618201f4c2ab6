package client

import (
	"strconv"
	"testing"
)

// ttlEdges are ttl header values at and just past parseTTL's edges.
var ttlEdges = []string{
	"", "0", "7", "1000", "4294967295", "4294967296", "00000000004294967295", "99999999999999999999999",
	"-1", "+1", "1_000", "0x10", "1a", " 1", "1 ", "١",
}

func TestTTLParsesAsParseUint(t *testing.T) {
	for _, v := range ttlEdges {
		checkTTL(t, v)
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
