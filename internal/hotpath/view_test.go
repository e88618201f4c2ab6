package hotpath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"busbar/wire"
)

// textFrame builds a text frame from header lines and a body.
func textFrame(body string, lines ...string) []byte {
	var b strings.Builder
	b.WriteString("---\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString("---\n" + body)
	return []byte(b.String())
}

func headerLines(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("h%05d: %d", i, i)
	}
	return lines
}

func TestViewMatchesDecode(t *testing.T) {
	frames := []string{
		"---\n---\n",
		"---\n---",
		"---\ncommand: ch\nfrom: forged\nid: 1\nto: a.bus\nttl: 500\ntype: event\n---\nbody \x00",
		"---\ntype: request\nid: 2\ncommand: c\n---\n", // unsorted
		"---\ntype: request\nid: 2\ncommand: c\n---",   // unsorted, no final newline
		"---\nargs: {\"a\":1}\nrc: 10\nerror: no\nresult: HANDLER_FAILED\nreply-to: 9\n---\n",
		"---\na: 1\nbus: 1\ncommand: c\nerror: e\nfrom: f\nid: i\nrc: 0\nreply-to: r\nresult: OK\nto: t\nttl: 5\ntype: event\nx-trace: t\n---\n",
		"---\nz: 1\na: 2\n---\nbody\n---\nmore", // unsorted, a delimiter in the body
		"---\na: 1\nb: 2\na: 3\n---\n",          // duplicate, unsorted
		"---\na: 1\na: 2\n---\n",                // duplicate, sorted
		"---\nbad line\n---\n",                  // defect
		"---\nx: {oops\n---\n",                  // bad JSON
		"no frame",                              // structure
		"---\nk: \xff\n---\n",                   // invalid UTF-8
	}
	for _, f := range frames {
		var v View
		verr := ParseView([]byte(f), &v)
		m, derr := wire.Decode([]byte(f))
		if (verr == nil) != (derr == nil) {
			t.Fatalf("%q: view %v, decode %v", f, verr, derr)
		}
		if verr != nil {
			if !errors.Is(verr, wire.ErrMalformed) || verr.Error() != derr.Error() {
				t.Fatalf("%q: view %v, decode %v", f, verr, derr)
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
		for k := range m.Headers() { // keys a View does not keep read as absent
			if s, ok := v.Get(k); !slices.Contains(knownNames[:], k) && (ok || s != "") {
				t.Fatalf("%q: Get(%q) = %q, %v", f, k, s, ok)
			}
		}
		if !bytes.Equal(v.Body(), m.Body()) || v.IsHeartbeat() != m.IsHeartbeat() {
			t.Fatalf("%q: body %q vs %q", f, v.Body(), m.Body())
		}
		if v.Others() != hasOthers(m) {
			t.Fatalf("%q: Others() = %v", f, v.Others())
		}
	}
}

// hasOthers reports whether m has a header a View does not keep.
func hasOthers(m *wire.Message) bool {
	for k := range m.Headers() {
		if !slices.Contains(knownNames[:], k) {
			return true
		}
	}
	return false
}

func TestParseViewLimits(t *testing.T) {
	at := textFrame("b", headerLines(wire.MaxHeaders)...)
	var v View
	if err := ParseView(at, &v); err != nil {
		t.Fatalf("at MaxHeaders: %v", err)
	}
	past := textFrame("b", headerLines(wire.MaxHeaders+1)...)
	var pe *wire.ParseError
	if err := ParseView(past, &v); !errors.As(err, &pe) || pe.Kind != wire.DefectTooManyHeaders {
		t.Fatalf("past MaxHeaders: %v", err)
	}
	big := make([]byte, wire.MaxMessageBytes+1)
	if err := ParseView(big, &v); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("past MaxMessageBytes: %v", err)
	}
}

// FuzzView holds ParseView to wire.Decode's verdict and values, the
// one-pass AppendForward to the line-by-line one, and the forwarded frame
// to the message it came from.
func FuzzView(f *testing.F) {
	f.Add([]byte("---\ncommand: ch\nid: 1\ntype: event\n---\nbody"))
	f.Add([]byte("---\nb: 1\na: 2\na: 3\n---\n"))
	f.Add([]byte("---\ncommand: c\nfrom: forged\nid: 1\nttl: 5\ntype: stream\n---\nbody"))
	f.Add([]byte("---\nttl: 5\nfrom: forged\nzz: 1\n---\nbody"))
	f.Add([]byte("---\na:b: c\nz: {\"j\": 1}\n---"))
	f.Add([]byte("---\n---"))
	f.Add([]byte("---\nk\u00e9y: v\n---\n"))
	// The fast path's edges: kept keys recognised by their first word
	// (and near misses of them), lines shorter than a word at the frame's
	// end, newlines and non-ASCII bytes at each place in a word.
	f.Add([]byte("---\nbus: 1\ncommand: c\nerror: e\nfrom: f\nid: i\nrc: 0\nreply-to: r\nresult: OK\nto: t\nttl: 5\ntype: event\n---\n"))
	f.Add([]byte("---\ncommand:x\ncommandx: 1\nids: 2\nreply-to:x\nreply-too: 3\nresult:x\nttl:x\n---\n"))
	f.Add([]byte("---\nid: \nto: \n---"))
	f.Add([]byte("---\nab\n---"))
	f.Add([]byte("---\nid: 1234567\xc3\xa9\n---\n\xff"))
	f.Add([]byte("---\ntype: str\xffam\n---\n"))
	f.Add([]byte("---\nid: 1\nid: 1\n---\n"))
	f.Add([]byte("---\nto: a\nbus: 1\n---\n"))
	f.Add([]byte("---\nfrom: a\nfroma: b\nttl: 1\nttla: 2\n---\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		var v View
		verr := ParseView(text, &v)
		m, derr := wire.Decode(text)
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
			// What a broker reserves before it forwards in place.
			if n, ok := ForwardLen(&v, "x.bus", withTTL); ok && n != len(fast)-1 {
				t.Fatalf("ttl %v: ForwardLen %d, AppendForward appended %d", withTTL, n, len(fast)-1)
			}
		}
		for _, k := range knownNames {
			if a, b := v.Value(k), m.Value(k); a != b {
				t.Fatalf("%s: %q vs %q", k, a, b)
			}
		}
		if !bytes.Equal(v.Body(), m.Body()) || v.IsHeartbeat() != m.IsHeartbeat() {
			t.Fatalf("body %q vs %q", v.Body(), m.Body())
		}
		if v.Others() != hasOthers(m) {
			t.Fatalf("Others() = %v", v.Others())
		}
		out, off := AppendForward(nil, &v, "x.bus", true)
		PatchTTL(out[off:], 5)
		got, err := wire.NewReader(bytes.NewReader(out)).ReadMessage()
		if err != nil || !got.Equal(m.Clone().WithHeader(wire.HeaderFrom, "x.bus").WithHeader(wire.HeaderTTL, "0000000005")) {
			t.Fatalf("forward: %v", err)
		}
	})
}

// TestKeyWords checks keyAt's constants against the header names.
func TestKeyWords(t *testing.T) {
	word := func(s string) uint64 {
		var b [8]byte
		copy(b[:], s)
		return binary.LittleEndian.Uint64(b[:])
	}
	for _, c := range []struct {
		w   uint64
		key string
	}{
		{wBus, wire.HeaderBus + ": "}, {wCommand, wire.HeaderCommand + ":"}, {wError, wire.HeaderError + ": "},
		{wFrom, wire.HeaderFrom + ": "}, {wID, wire.HeaderID + ": "}, {wRC, wire.HeaderRC + ": "},
		{wResult, wire.HeaderResult + ": "}, {wReplyTo, wire.HeaderReplyTo}, {wTo, wire.HeaderTo + ": "},
		{wTTL, wire.HeaderTTL + ": "}, {wType, wire.HeaderType + ": "}, {wDelim, delim},
	} {
		if c.w != word(c.key) {
			t.Errorf("%q: %#x, want %#x", c.key, c.w, word(c.key))
		}
	}
}
