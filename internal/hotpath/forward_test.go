package hotpath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"

	"busbar/wire"
)

func TestAppendForward(t *testing.T) {
	orig := wire.New(wire.TypeEvent, "orders.created").WithHeader(wire.HeaderID, "id-1").WithHeader(wire.HeaderFrom, "mallory.bus").
		WithHeader(wire.HeaderTTL, "99").WithHeader("x-trace", "t").WithBody([]byte("pay\x00load "))
	for _, m := range []*wire.Message{orig, wire.New(wire.TypeStream, "c"), wire.Empty().WithHeader("a", "1").WithHeader("zz", "2")} {
		text := m.ToBytes()
		var v View
		if err := ParseView(text, &v); err != nil {
			t.Fatal(err)
		}
		out, off := AppendForward([]byte("prefix"), &v, "alpha.bus", true)
		frame := out[len("prefix"):]
		if string(frame[off-len("prefix")-len(wire.HeaderTTL)-2:off-len("prefix")]) != "ttl: " {
			t.Fatalf("ttl offset %d does not point at the ttl digits in %q", off, frame)
		}
		if FrameLen(frame) != len(frame)-prefixLen {
			t.Fatalf("FrameLen %d of a %d-byte frame", FrameLen(frame), len(frame))
		}
		PatchTTL(out[off:], 1234)
		got, err := wire.NewReader(bytes.NewReader(frame)).ReadMessage()
		if err != nil {
			t.Fatalf("forwarded frame: %v\n%q", err, frame)
		}
		want := m.Clone().WithHeader(wire.HeaderFrom, "alpha.bus").WithHeader(wire.HeaderTTL, "0000001234")
		if !got.Equal(want) {
			t.Fatalf("forwarded\n%q\nwant\n%q", got, want)
		}
		if ms, err := strconv.ParseUint(got.Value(wire.HeaderTTL), 10, 32); err != nil || ms != 1234 {
			t.Fatalf("ttl %q", got.Value(wire.HeaderTTL))
		}
		// Without a ttl: only from changes, any ttl of the sender's is kept.
		plain, off := AppendForward(nil, &v, "alpha.bus", false)
		got, err = wire.NewReader(bytes.NewReader(plain)).ReadMessage()
		if err != nil || off != -1 || !got.Equal(m.Clone().WithHeader(wire.HeaderFrom, "alpha.bus")) {
			t.Fatalf("without ttl: %v %d %q", err, off, got)
		}
	}
}

func TestPatchTTL(t *testing.T) {
	b := make([]byte, TTLWidth)
	for ms, want := range map[int64]string{0: "0000000000", -5: "0000000000", 42: "0000000042", 1 << 40: "4294967295"} {
		PatchTTL(b, ms)
		if string(b) != want {
			t.Errorf("PatchTTL(%d) = %s", ms, b)
		}
	}
	// Every digit count, at and around each power of ten, and the u32 edge.
	for p := int64(1); p <= 1e10; p *= 10 {
		for _, ms := range []int64{p - 1, p, p + 1, 2*p - 1, 5 * p, 9*p + 7, 1<<32 - 2, 1<<32 - 1, 1 << 32} {
			copy(b, "xxxxxxxxxx")
			PatchTTL(b, ms)
			if want := fmt.Sprintf("%010d", min(ms, 1<<32-1)); string(b) != want {
				t.Errorf("PatchTTL(%d) = %s, want %s", ms, b, want)
			}
		}
	}
	if len(ttlSlot) != TTLWidth+1 {
		t.Fatalf("ttl slot %q is not TTLWidth digits and a newline", ttlSlot)
	}
}

// eightDigits's reciprocals are exact only in their ranges: every value
// below 20,000 and a stride through the rest of 0 to 10^8 are held to
// strconv.
func TestEightDigitsAsStrconv(t *testing.T) {
	var b [8]byte
	check := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], eightDigits(v))
		want := strconv.AppendUint(nil, v+100_000_000, 10)[1:] // zero-padded to eight
		if string(b[:]) != string(want) {
			t.Fatalf("eightDigits(%d) = %q, want %q", v, b[:], want)
		}
	}
	for v := range uint64(20_000) {
		check(v)
	}
	for v := uint64(20_000); v < 100_000_000; v += 97 {
		check(v)
	}
	check(99_999_999)
}

func TestViewAndForwardZeroAllocs(t *testing.T) {
	text := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderTTL, "500").WithBody(make([]byte, 128)).ToBytes()
	var v View
	dst := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		if err := ParseView(text, &v); err != nil {
			t.Fatal(err)
		}
		_, _ = v.Get(wire.HeaderCommand)
		var off int
		dst, off = AppendForward(dst[:0], &v, "alpha.bus", true)
		PatchTTL(dst[off:], 77)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per frame", allocs)
	}
}
