package wire

// Zero-copy views of frames: agreement with the decoder, limits,
// forwarding and TTL patching with no allocation, and events built in place.

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
)

func TestViewMatchesDecode(t *testing.T) {
	frames := []string{
		"---\n---\n",
		"---\ncommand: ch\nfrom: forged\nid: 1\nto: a.bus\nttl: 500\ntype: event\n---\nbody \x00",
		"---\ntype: request\nid: 2\ncommand: c\n---\n", // unsorted
		"---\nargs: {\"a\":1}\nrc: 10\nerror: no\nresult: HANDLER_FAILED\nreply-to: 9\n---\n",
		"---\na: 1\nb: 2\na: 3\n---\n", // duplicate, unsorted
		"---\na: 1\na: 2\n---\n",       // duplicate, sorted
		"---\nbad line\n---\n",         // defect
		"---\nx: {oops\n---\n",         // bad JSON
		"no frame",                     // structure
		"---\nk: \xff\n---\n",          // invalid UTF-8
	}
	for _, f := range frames {
		var v View
		verr := ParseView([]byte(f), &v)
		m, derr := Decode([]byte(f))
		if (verr == nil) != (derr == nil) {
			t.Fatalf("%q: view %v, decode %v", f, verr, derr)
		}
		if verr != nil {
			if !errors.Is(verr, ErrMalformed) {
				t.Fatalf("%q: untyped %v", f, verr)
			}
			continue
		}
		for _, k := range knownNames {
			vv, vok := v.Get(k)
			mv, mok := m.Get(k)
			if vv != mv || vok != mok {
				t.Fatalf("%q: %s = %q,%v vs %q,%v", f, k, vv, vok, mv, mok)
			}
		}
		if !bytes.Equal(v.Body(), m.Body()) || v.IsHeartbeat() != m.IsHeartbeat() {
			t.Fatalf("%q: body %q vs %q", f, v.Body(), m.Body())
		}
	}
}

func TestParseViewLimits(t *testing.T) {
	at := frame("b", headerLines(MaxHeaders)...)
	var v View
	if err := ParseView(at, &v); err != nil {
		t.Fatalf("at MaxHeaders: %v", err)
	}
	past := frame("b", headerLines(MaxHeaders+1)...)
	var pe *ParseError
	if err := ParseView(past, &v); !errors.As(err, &pe) || pe.Kind != DefectTooManyHeaders {
		t.Fatalf("past MaxHeaders: %v", err)
	}
}

func TestAppendForward(t *testing.T) {
	orig := New(TypeEvent, "orders.created").WithHeader(HeaderID, "id-1").WithHeader(HeaderFrom, "mallory.bus").
		WithHeader(HeaderTTL, "99").WithHeader("x-trace", "t").WithBody([]byte("pay\x00load "))
	for _, m := range []*Message{orig, New(TypeStream, "c"), Empty().WithHeader("a", "1").WithHeader("zz", "2")} {
		text := m.ToBytes()
		var v View
		if err := ParseView(text, &v); err != nil {
			t.Fatal(err)
		}
		out, off := AppendForward([]byte("prefix"), &v, "alpha.bus", true)
		frame := out[len("prefix"):]
		if string(frame[off-len("prefix")-len(HeaderTTL)-2:off-len("prefix")]) != "ttl: " {
			t.Fatalf("ttl offset %d does not point at the ttl digits in %q", off, frame)
		}
		PatchTTL(out[off:], 1234)
		got, err := NewReader(bytes.NewReader(frame)).ReadMessage()
		if err != nil {
			t.Fatalf("forwarded frame: %v\n%q", err, frame)
		}
		want := m.Clone().WithHeader(HeaderFrom, "alpha.bus").WithHeader(HeaderTTL, "0000001234")
		if !got.Equal(want) {
			t.Fatalf("forwarded\n%q\nwant\n%q", got, want)
		}
		if ms, err := strconv.ParseUint(got.Value(HeaderTTL), 10, 32); err != nil || ms != 1234 {
			t.Fatalf("ttl %q", got.Value(HeaderTTL))
		}
		// Without a ttl: only from changes, any ttl of the sender's is kept.
		plain, off := AppendForward(nil, &v, "alpha.bus", false)
		got, err = NewReader(bytes.NewReader(plain)).ReadMessage()
		if err != nil || off != -1 || !got.Equal(m.Clone().WithHeader(HeaderFrom, "alpha.bus")) {
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
}

func TestViewAndForwardZeroAllocs(t *testing.T) {
	text := New(TypeStream, "orders.created").WithHeader(HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(HeaderTTL, "500").WithBody(make([]byte, 128)).ToBytes()
	var v View
	dst := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		if err := ParseView(text, &v); err != nil {
			t.Fatal(err)
		}
		_, _ = v.Get(HeaderCommand)
		var off int
		dst, off = AppendForward(dst[:0], &v, "alpha.bus", true)
		PatchTTL(dst[off:], 77)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per frame", allocs)
	}
}

func FuzzView(f *testing.F) {
	f.Add([]byte("---\ncommand: ch\nid: 1\ntype: event\n---\nbody"))
	f.Add([]byte("---\nb: 1\na: 2\na: 3\n---\n"))
	f.Add([]byte("---\ncommand: c\nfrom: forged\nid: 1\nttl: 5\ntype: stream\n---\nbody"))
	f.Add([]byte("---\na:b: c\nz: {\"j\": 1}\n---"))
	f.Add([]byte("---\n---"))
	f.Add([]byte("---\nk\u00e9y: v\n---\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		var v View
		verr := ParseView(text, &v)
		m, derr := Decode(text)
		if (verr == nil) != (derr == nil) || verr != nil && verr.Error() != derr.Error() {
			t.Fatalf("view %v, decode %v", verr, derr)
		}
		if verr != nil {
			return
		}
		// The one-pass forward must write what the line-by-line one writes.
		for _, withTTL := range []bool{false, true} {
			fast, fastOff := AppendForward([]byte("x"), &v, "x.bus", withTTL)
			scan, scanOff := appendForwardScan([]byte("x"), &v, "x.bus", withTTL)
			if !bytes.Equal(fast, scan) || fastOff != scanOff {
				t.Fatalf("ttl %v: forward %q (%d), scan %q (%d)", withTTL, fast, fastOff, scan, scanOff)
			}
		}
		for _, k := range knownNames {
			if a, b := v.Value(k), m.Value(k); a != b {
				t.Fatalf("%s: %q vs %q", k, a, b)
			}
		}
		out, off := AppendForward(nil, &v, "x.bus", true)
		PatchTTL(out[off:], 5)
		got, err := NewReader(bytes.NewReader(out)).ReadMessage()
		if err != nil || !got.Equal(m.Clone().WithHeader(HeaderFrom, "x.bus").WithHeader(HeaderTTL, "0000000005")) {
			t.Fatalf("forward: %v", err)
		}
	})
}

func TestAppendEvent(t *testing.T) {
	out, off := AppendEvent(nil, TypeStream, "orders.created", []byte("id-1"), []byte("body \x00"), true)
	PatchTTL(out[off:], 250)
	got, err := NewReader(bytes.NewReader(out)).ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	want := New(TypeStream, "orders.created").WithHeader(HeaderID, "id-1").WithHeader(HeaderTTL, "0000000250").WithBody([]byte("body \x00"))
	if !got.Equal(want) {
		t.Fatalf("%q", got)
	}
	plain, off := AppendEvent(nil, TypeStream, "c", []byte("i"), nil, false)
	if got, err := NewReader(bytes.NewReader(plain)).ReadMessage(); err != nil || off != -1 || got.Value(HeaderTTL) != "" || got.Len() != 3 {
		t.Fatalf("without ttl: %v %d %q", err, off, got)
	}
	dst := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { dst, _ = AppendEvent(dst[:0], TypeStream, "c", []byte("i"), nil, true) }); a != 0 {
		t.Fatalf("%.1f allocs", a)
	}
}
