package wire_test

// Black-box adversarial tests for busbar/wire, through its exported API
// only: they pin the edge cases of parsing (every mode, every defect kind,
// header and size limits, CR and invalid UTF-8), the framed stream (short
// and minimal frames, errors, buffer reuse, a writer after a refusal),
// validation, reply codes and address and target forms. Every test is named
// TestAdv*, every helper adv*. All pass: none documents an open defect.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"
	"testing/iotest"

	"busbar/wire"
)

// ---------------------------------------------------------------- helpers

func advPrefixed(text []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(text))), text...)
}

// advSentinels lists which of the three package sentinels err matches.
func advSentinels(err error) []error {
	var out []error
	for _, s := range []error{wire.ErrTooLarge, wire.ErrTruncated, wire.ErrMalformed} {
		if errors.Is(err, s) {
			out = append(out, s)
		}
	}
	return out
}

func advWantSentinel(t *testing.T, what string, err, want error) {
	t.Helper()
	got := advSentinels(err)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("%s: err = %v; matches %v, want exactly %v", what, err, got, want)
	}
}

func advWantDefect(t *testing.T, what string, err error, line int, kind wire.DefectKind) {
	t.Helper()
	var pe *wire.ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: err = %v (%T), want *wire.ParseError", what, err, err)
	}
	if pe.Line != line || pe.Kind != kind {
		t.Fatalf("%s: defect line %d kind %v, want line %d kind %v", what, pe.Line, pe.Kind, line, kind)
	}
	advWantSentinel(t, what, err, wire.ErrMalformed)
}

// advHeaders returns n distinct, sorted, valid header lines.
func advHeaders(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "h%05d: v\n", i)
	}
	return b.String()
}

// advMesh returns a valid FQDN of exactly n bytes (n > 63).
func advMesh(n int) string {
	var labels []string
	for n > 63 {
		labels = append(labels, strings.Repeat("m", 60))
		n -= 61
	}
	labels = append(labels, strings.Repeat("e", n))
	return strings.Join(labels, ".")
}

// oneReadThenErr yields data, then err forever.
type oneReadThenErr struct {
	data []byte
	err  error
}

func (r *oneReadThenErr) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// -------------------------------------------------------- former defects

// A cross-mesh target is accepted only if its display form (Target.String
// adds ".bus" to a suffix-less local part) fits MaxAddressLen and parses
// back to the same target.
// (A target whose written form fit 253 bytes used to be accepted with a
// longer display form that did not parse back: a router that logged or
// forwarded t.String() broke.)
func TestAdvCrossMeshDisplayFormWithinLimit(t *testing.T) {
	for _, local := range []string{"a.b", "s.a.b"} {
		for _, total := range []int{250, 253} {
			s := local + "@" + advMesh(total-len(local)-1)
			if len(s) != total {
				t.Fatalf("helper built %d bytes, want %d", len(s), total)
			}
			tg, err := wire.ParseTarget(s)
			if err != nil {
				continue // refusing is acceptable
			}
			disp := tg.String()
			if len(disp) > wire.MaxAddressLen {
				t.Errorf("ParseTarget(%d-byte %q...) accepted; display form is %d bytes > %d", len(s), s[:12], len(disp), wire.MaxAddressLen)
			}
			if back, err := wire.ParseTarget(disp); err != nil || back != tg {
				t.Errorf("display form of accepted target does not round-trip: %v", err)
			}
		}
	}
}

// Keys containing Unicode whitespace or C1 control characters (U+0085 NEL
// is both, U+00A0, U+2028, U+3000, U+009F) are refused by ParseStrict and by
// Message.Check (spec: "whitespace/control char in key").
// (validKey used to look at ASCII bytes only, and accepted them.)
func TestAdvKeyUnicodeWhitespaceOrControl(t *testing.T) {
	for _, r := range []rune{'\u0085', '\u00a0', '\u2028', '\u3000', '\u009f'} {
		key := "a" + string(r) + "b"
		in := []byte("---\n" + key + ": v\n---\n")
		_, err := wire.ParseStrict(in)
		if err == nil {
			t.Errorf("ParseStrict accepted key with %U", r)
		} else {
			advWantDefect(t, fmt.Sprintf("key with %U", r), err, 2, wire.DefectKeyWhitespace)
		}
		if err := wire.Empty().WithHeader(key, "v").Check(); err == nil {
			t.Errorf("Check accepted key with %U", r)
		}
	}
}

// When a too-short frame (< 7 bytes) is being discarded and the transport
// fails (a deadline, say), the reader reports the transport error, not
// ErrTruncated, as the body path (Reader.read) does.
// (Reader.next used to report ErrTruncated and drop the transport error.)
func TestAdvShortFrameDiscardKeepsTransportError(t *testing.T) {
	boom := errors.New("boom: deadline")
	r := wire.NewReader(&oneReadThenErr{data: []byte{0, 0, 0, 5, '-'}, err: boom})
	_, err := r.ReadFrame()
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v; want the transport error to be visible", err)
	}
	if errors.Is(err, wire.ErrTruncated) {
		t.Fatalf("err = %v; a transport failure is not a truncated stream", err)
	}
	// Same situation on the body path, for comparison (this is handled).
	r = wire.NewReader(&oneReadThenErr{data: advPrefixed([]byte("---\n---\n"))[:6], err: boom})
	if _, err := r.ReadFrame(); !errors.Is(err, boom) || errors.Is(err, wire.ErrTruncated) {
		t.Fatalf("body path: err = %v", err)
	}
}

// ----------------------------------------------------- text frame edges

func TestAdvHeartbeatForms(t *testing.T) {
	for _, in := range []string{"---\n---\n", "---\n---", "---\n---\n \t\r\n"} {
		for name, parse := range map[string]func([]byte) (*wire.Message, error){"Parse": wire.Parse, "Strict": wire.ParseStrict} {
			m, err := parse([]byte(in))
			if err != nil || !m.IsHeartbeat() {
				t.Fatalf("%s(%q) = %q, %v; want heartbeat", name, in, m, err)
			}
		}
	}
	if got := wire.Empty().ToWire(); got != "---\n---\n" {
		t.Fatalf("Empty().ToWire() = %q", got)
	}
}

func TestAdvClosingWithoutNewline(t *testing.T) {
	m, err := wire.ParseStrict([]byte("---\nb: 2\na: 1\n---"))
	if err != nil || m.Len() != 2 || m.Value("a") != "1" || len(m.Body()) != 0 {
		t.Fatalf("got %q %v", m, err)
	}
	// "---" at the very end after body-like lines: the lines are header defects.
	_, rep, err := wire.ParseLenient([]byte("---\na: 1\nbody\n---"))
	if err != nil || len(rep.Defects) != 1 || rep.Defects[0].Line != 3 || rep.Defects[0].Kind != wire.DefectMissingSeparator {
		t.Fatalf("report %v err %v", rep.Strings(), err)
	}
}

func TestAdvStructuralErrorsEveryMode(t *testing.T) {
	bad := []string{
		"", "-", "---", "---\n", "--\n---\n", " ---\n---\n", "---\n--", "---\n---x",
		"---\r\n---\r\n", "---\n---\r\n", "---\na: b\n", "---\na: b\n--- \n", "---\na: b\n---x\n",
		"\n---\n---\n",
	}
	for _, in := range bad {
		_, err1 := wire.Parse([]byte(in))
		_, _, err2 := wire.ParseLenient([]byte(in))
		_, err3 := wire.ParseStrict([]byte(in))
		_, err4 := wire.Decode([]byte(in))
		for i, err := range []error{err1, err2, err3, err4} {
			var pe *wire.ParseError
			if !errors.As(err, &pe) || pe.Kind != wire.DefectStructure {
				t.Errorf("mode %d, %q: err = %v, want DefectStructure", i, in, err)
				continue
			}
			advWantSentinel(t, fmt.Sprintf("%q", in), err, wire.ErrMalformed)
		}
	}
}

func TestAdvEachDefectKind(t *testing.T) {
	cases := []struct {
		line string
		kind wire.DefectKind
	}{
		{" a: 1", wire.DefectLeadingWhitespace},
		{"\ta: 1", wire.DefectLeadingWhitespace},
		{"a:1", wire.DefectMissingSeparator},
		{"a:", wire.DefectMissingSeparator},
		{"", wire.DefectMissingSeparator},
		{": v", wire.DefectEmptyKey},
		{"a b: v", wire.DefectKeyWhitespace},
		{"a\x01: v", wire.DefectKeyWhitespace},
		{"a\x7f: v", wire.DefectKeyWhitespace},
		{"a\r: v", wire.DefectKeyWhitespace},
		{"a : v", wire.DefectKeyWhitespace},
		{"args: [1,", wire.DefectBadJSON},
		{"json: {", wire.DefectBadJSON},
		{"x: {\"a\":}", wire.DefectBadJSON},
		{"z: 1", wire.DefectDuplicate}, // first "z" is on line 2
	}
	for _, c := range cases {
		in := []byte("---\nz: 0\n" + c.line + "\ny: ok\n---\nbody")
		_, err := wire.ParseStrict(in)
		advWantDefect(t, fmt.Sprintf("strict %q", c.line), err, 3, c.kind)
		m, rep, err := wire.ParseLenient(in)
		if err != nil || len(rep.Defects) != 1 || rep.Defects[0].Line != 3 || rep.Defects[0].Kind != c.kind {
			t.Errorf("lenient %q: %v %v", c.line, rep.Strings(), err)
			continue
		}
		want := 2
		if c.kind.OfValue() { // kept with its raw value
			k, v, _ := strings.Cut(c.line, ": ")
			if want = 3; m.Value(k) != v {
				t.Errorf("lenient %q did not keep the value: %q", c.line, m)
			}
		}
		if m.Value("z") != "0" || m.Value("y") != "ok" || m.Len() != want || string(m.Body()) != "body" {
			t.Errorf("lenient %q kept %q", c.line, m)
		}
		p, err := wire.Parse(in)
		if err != nil || !p.Equal(m) {
			t.Errorf("plain %q: %q %v", c.line, p, err)
		}
	}
	// Not defects: JSON-shaped only when the first byte is '[' or '{'.
	for _, v := range []string{"", " [", "x{", "[1]", "{}", "[1] ", `"str"`, "a: b: c", "::"} {
		m, err := wire.ParseStrict([]byte("---\nk: " + v + "\n---\n"))
		if err != nil || m.Value("k") != v {
			t.Errorf("value %q: %q %v", v, m, err)
		}
	}
}

func TestAdvDuplicatesFirstKeptOutOfOrder(t *testing.T) {
	in := "---\nb: 1\na: 1\nb: 2\nc: 1\na: 2\n---\n"
	m, rep, err := wire.ParseLenient([]byte(in))
	if err != nil || m.Value("a") != "1" || m.Value("b") != "1" || m.Len() != 3 {
		t.Fatalf("%q %v", m, err)
	}
	if len(rep.Defects) != 2 || rep.Defects[0].Line != 4 || rep.Defects[1].Line != 6 {
		t.Fatalf("report %v", rep.Strings())
	}
	if got := m.ToWire(); got != "---\na: 1\nb: 1\nc: 1\n---\n" {
		t.Fatalf("not sorted: %q", got)
	}
}

func TestAdvBodyEdges(t *testing.T) {
	cases := []struct{ in, body string }{
		{"---\na: 1\n---\nx\n---\ny: z\n---\n", "x\n---\ny: z\n---"},
		{"---\n---\n---\n", "---"},
		{"---\n---\n\n\n  x  \r\n\t\v\f", "\n\n  x"},
		{"---\n---\nx\r", "x"},
		{"---\n---\nx\u00a0", "x\u00a0"}, // only ASCII whitespace is trimmed
		{"---\n---\nx\xff\xfe", "x\xff\xfe"},
		{"---\n---\n\x00", "\x00"},
		{"---\na: 1\n---\n\r\nx", "\r\nx"},
	}
	for _, c := range cases {
		m, err := wire.ParseStrict([]byte(c.in))
		if err != nil || string(m.Body()) != c.body {
			t.Errorf("%q: body %q %v, want %q", c.in, m.Body(), err, c.body)
		}
	}
}

func TestAdvCRInValuesAndInvalidUTF8Refused(t *testing.T) {
	m := wire.Empty().WithHeader("k", "v\r").WithHeader("x", "a\rb")
	if err := m.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	got, err := wire.ParseStrict(m.ToBytes())
	if err != nil || !got.Equal(m) {
		t.Fatalf("%q -> %q %v", m, got, err)
	}
	// Headers are text: invalid UTF-8 in a key or a value is a defect.
	for _, c := range []struct {
		k, v string
		want wire.DefectKind
	}{
		{"\xff\xfe", "v", wire.DefectKeyWhitespace},
		{"k", "\xc0\x80", wire.DefectInvalidUTF8},
	} {
		bad := wire.Empty().WithHeader(c.k, c.v)
		var pe *wire.ParseError
		if err := bad.Check(); !errors.As(err, &pe) || pe.Kind != c.want {
			t.Errorf("Check(%q: %q) = %v, want %v", c.k, c.v, err, c.want)
		}
		if _, err := wire.ParseStrict(bad.ToBytes()); !errors.As(err, &pe) || pe.Kind != c.want {
			t.Errorf("ParseStrict(%q: %q) = %v, want %v", c.k, c.v, err, c.want)
		}
	}
}

func TestAdvMaxHeadersBoundary(t *testing.T) {
	ok := []byte("---\n" + advHeaders(wire.MaxHeaders) + "---\nbody")
	for name, parse := range map[string]func([]byte) (*wire.Message, error){"Parse": wire.Parse, "Strict": wire.ParseStrict, "Decode": wire.Decode} {
		m, err := parse(ok)
		if err != nil || m.Len() != wire.MaxHeaders {
			t.Fatalf("%s with %d headers: len %d, %v", name, wire.MaxHeaders, m.Len(), err)
		}
	}
	over := []byte("---\n" + advHeaders(wire.MaxHeaders+2) + "---\nbody")
	_, err := wire.ParseStrict(over)
	advWantDefect(t, "strict 4097", err, wire.MaxHeaders+2, wire.DefectTooManyHeaders)
	_, err = wire.Decode(over)
	advWantDefect(t, "decode 4097", err, wire.MaxHeaders+2, wire.DefectTooManyHeaders)
	m, rep, err := wire.ParseLenient(over)
	if err != nil || m.Len() != wire.MaxHeaders || string(m.Body()) != "body" {
		t.Fatalf("lenient: len %d body %q err %v", m.Len(), m.Body(), err)
	}
	if len(rep.Defects) != 1 || rep.Defects[0].Kind != wire.DefectTooManyHeaders || rep.Defects[0].Line != wire.MaxHeaders+2 {
		t.Fatalf("lenient report %v", rep.Strings())
	}
	if _, ok := m.Get(fmt.Sprintf("h%05d", wire.MaxHeaders)); ok {
		t.Fatal("header 4097 kept")
	}
	// Defective lines count towards the limit.
	mixed := []byte("---\nbad\n" + advHeaders(wire.MaxHeaders) + "---\n")
	m, rep, _ = wire.ParseLenient(mixed)
	if m.Len() != wire.MaxHeaders-1 || len(rep.Defects) != 2 {
		t.Fatalf("mixed: len %d, %v", m.Len(), rep.Strings())
	}
	// Check and the writer refuse 4097 headers.
	big := wire.Empty()
	for i := range wire.MaxHeaders + 1 {
		big.Set(fmt.Sprintf("h%05d", i), "v")
	}
	if err := big.Check(); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("Check 4097: %v", err)
	}
	big.Del("h00000")
	if err := big.Check(); err != nil {
		t.Fatalf("Check 4096: %v", err)
	}
}

func TestAdvMaxMessageBytesBoundary(t *testing.T) {
	head := "---\nk: v\n---\n"
	exact := make([]byte, wire.MaxMessageBytes)
	copy(exact, head)
	for i := len(head); i < len(exact); i++ {
		exact[i] = 'x'
	}
	m, err := wire.Parse(exact)
	if err != nil || len(m.Body()) != wire.MaxMessageBytes-len(head) {
		t.Fatalf("exactly 16 MiB: %v", err)
	}
	if _, err := wire.Decode(exact); err != nil {
		t.Fatalf("Decode 16 MiB: %v", err)
	}
	if err := m.Check(); err != nil {
		t.Fatalf("Check 16 MiB: %v", err)
	}
	over := append(exact, 'x')
	for name, f := range map[string]func([]byte) (*wire.Message, error){"Parse": wire.Parse, "Strict": wire.ParseStrict, "Decode": wire.Decode} {
		_, err := f(over)
		var se *wire.SizeError
		if !errors.As(err, &se) || se.Size != wire.MaxMessageBytes+1 {
			t.Fatalf("%s 16 MiB+1: %v", name, err)
		}
		advWantSentinel(t, name, err, wire.ErrTooLarge)
	}
	m.SetBody(over[len(head):])
	if err := m.Check(); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("Check 16 MiB+1: %v", err)
	}
	if _, err := wire.AppendFrame(nil, m); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("AppendFrame 16 MiB+1: %v", err)
	}
	// Stream: exactly 16 MiB reads; 16 MiB+1 is refused from the prefix alone.
	r := wire.NewReader(bytes.NewReader(advPrefixed(exact)))
	if f, err := r.ReadFrame(); err != nil || len(f) != wire.MaxMessageBytes {
		t.Fatalf("stream 16 MiB: %v", err)
	}
	pfx := binary.BigEndian.AppendUint32(nil, wire.MaxMessageBytes+1)
	r = wire.NewReader(&oneReadThenErr{data: pfx, err: errors.New("read past prefix")})
	_, err = r.ReadMessage()
	advWantSentinel(t, "stream 16 MiB+1", err, wire.ErrTooLarge)
	r = wire.NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}))
	_, err = r.ReadFrame()
	advWantSentinel(t, "stream 4 GiB", err, wire.ErrTooLarge)
}

func TestAdvCheckMatchesParseStrict(t *testing.T) {
	// Every header Check accepts must survive ParseStrict; every one it
	// refuses must be refused by ParseStrict too.
	keys := []string{"k", "a:", "---", "-", "é", "\xff", "a\tb", " k", "", "k\n", "a:b", "{", "["}
	vals := []string{"", " ", "v ", " v", "[", "{", "[]", "a\nb", "\r", "x: y", "\x00", "---", "\xff"}
	for _, k := range keys {
		for _, v := range vals {
			m := wire.Empty().WithHeader(k, v).WithBody([]byte("b"))
			cerr := m.Check()
			got, perr := wire.ParseStrict(m.ToBytes())
			if cerr == nil && (perr != nil || !got.Equal(m)) {
				t.Errorf("Check ok but ParseStrict(%q) = %q, %v", m.ToWire(), got, perr)
			}
			if cerr != nil && perr == nil && got.Equal(m) {
				t.Errorf("Check refused %q/%q (%v) but it round-trips", k, v, cerr)
			}
		}
	}
}

func TestAdvTextRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	alpha := []byte("ab:-{}[]\" \t\r\n\x00\xff\xc3\xa9,1")
	str := func(n int) string {
		b := make([]byte, rng.Intn(n))
		for i := range b {
			b[i] = alpha[rng.Intn(len(alpha))]
		}
		return string(b)
	}
	checked := 0
	for range 20000 {
		m := wire.Empty()
		for range rng.Intn(5) {
			m.Set(str(6), str(8))
		}
		m.SetBody([]byte(str(20)))
		if m.Check() != nil {
			continue
		}
		checked++
		// stream: any body
		fr, err := wire.AppendFrame(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.NewReader(bytes.NewReader(fr)).ReadMessage()
		if err != nil || !got.Equal(m) {
			t.Fatalf("stream %q -> %q %v", m, got, err)
		}
		// text: body without trailing ASCII whitespace
		m.SetBody(bytes.TrimRight(m.Body(), " \t\r\n\v\f"))
		for name, parse := range map[string]func([]byte) (*wire.Message, error){"Parse": wire.Parse, "Strict": wire.ParseStrict, "Decode": wire.Decode} {
			got, err := parse(m.ToBytes())
			if err != nil || !got.Equal(m) {
				t.Fatalf("%s %q -> %q %v", name, m, got, err)
			}
		}
		if m.WireLen() != len(m.ToBytes()) {
			t.Fatalf("WireLen %d != %d", m.WireLen(), len(m.ToBytes()))
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d valid messages generated", checked)
	}
}

func TestAdvParseNoPanicShortInputs(t *testing.T) {
	// Exhaustive over short inputs built from the interesting bytes.
	alpha := []byte("-\n: a[\r")
	var rec func(prefix []byte, depth int)
	rec = func(prefix []byte, depth int) {
		for _, in := range [][]byte{prefix, append([]byte("---\n"), prefix...)} {
			_, _ = wire.Parse(in)
			_, _, _ = wire.ParseLenient(in)
			_, _ = wire.ParseStrict(in)
			_, _ = wire.Decode(in)
			_, _ = wire.NewReader(bytes.NewReader(advPrefixed(in))).ReadMessage()
		}
		if depth == 0 {
			return
		}
		for _, c := range alpha {
			rec(append(append([]byte(nil), prefix...), c), depth-1)
		}
	}
	rec(nil, 6)
}

func TestAdvParseCopiesInput(t *testing.T) {
	in := []byte("---\nk: value\n---\nbody")
	for name, parse := range map[string]func([]byte) (*wire.Message, error){"Parse": wire.Parse, "Decode": wire.Decode} {
		buf := bytes.Clone(in)
		m, err := parse(buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = 'X'
		}
		if m.Value("k") != "value" || string(m.Body()) != "body" {
			t.Fatalf("%s aliases its input: %q", name, m)
		}
	}
}

// --------------------------------------------------------------- streams

func TestAdvStreamAnyBodyRoundTrip(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	bodies := [][]byte{nil, {'\n'}, []byte("   "), []byte("\n---\n"), []byte("---\n"), all, []byte("x\n---"), bytes.Repeat([]byte("\n---\n"), 40000)}
	var buf bytes.Buffer
	w := wire.NewWriter(&buf)
	var sent []*wire.Message
	for i, b := range bodies {
		m := wire.New(wire.TypeEvent, "c").WithHeader("id", fmt.Sprint(i)).WithBody(b)
		sent = append(sent, m)
		if err := w.WriteMessage(m); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteMessage(wire.Empty()); err != nil { // heartbeat between
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, mk := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r },
		iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader,
	} {
		r := wire.NewReader(mk(bytes.NewReader(buf.Bytes())))
		var got []*wire.Message
		for {
			m, err := r.ReadMessage()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, m)
		}
		if len(got) != 2*len(sent) {
			t.Fatalf("got %d messages, want %d", len(got), 2*len(sent))
		}
		for i, m := range sent {
			if !got[2*i].Equal(m) || !got[2*i+1].IsHeartbeat() {
				t.Fatalf("message %d differs", i)
			}
		}
		// Messages read earlier are not disturbed by later reads (aliasing).
		if got[0].Value("id") != "0" || got[2].Value("command") != "c" {
			t.Fatal("earlier message changed")
		}
	}
}

func TestAdvStreamMinimalFrames(t *testing.T) {
	var stream []byte
	stream = append(stream, advPrefixed([]byte("---\n---"))...) // 7 bytes, no newline
	stream = append(stream, advPrefixed([]byte("---\n--"))...)  // 6 bytes: malformed, consumed
	stream = append(stream, advPrefixed(nil)...)                // 0 bytes: malformed
	stream = append(stream, advPrefixed([]byte("---\na: 1\n---"))...)
	stream = append(stream, advPrefixed([]byte("---\n---\n  "))...) // body not trimmed
	r := wire.NewReader(bytes.NewReader(stream))
	m, err := r.ReadMessage()
	if err != nil || !m.IsHeartbeat() {
		t.Fatalf("7-byte frame: %q %v", m, err)
	}
	for range 2 {
		_, err = r.ReadMessage()
		advWantSentinel(t, "short frame", err, wire.ErrMalformed)
	}
	m, err = r.ReadMessage()
	if err != nil || m.Value("a") != "1" {
		t.Fatalf("after short frames: %q %v", m, err)
	}
	m, err = r.ReadMessage()
	if err != nil || string(m.Body()) != "  " {
		t.Fatalf("untrimmed body: %q %v", m, err)
	}
	if _, err := r.ReadMessage(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestAdvStreamErrors(t *testing.T) {
	good := advPrefixed([]byte("---\na: 1\n---\nbody"))
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"1-byte prefix", good[:1], wire.ErrTruncated},
		{"3-byte prefix", good[:3], wire.ErrTruncated},
		{"prefix only", good[:4], wire.ErrTruncated},
		{"cut body", good[:len(good)-1], wire.ErrTruncated},
		{"short frame cut", []byte{0, 0, 0, 5, '-'}, wire.ErrTruncated},
		{"strict header", advPrefixed([]byte("---\nbad\n---\n")), wire.ErrMalformed},
		{"dup header", advPrefixed([]byte("---\na: 1\na: 2\n---\n")), wire.ErrMalformed},
		{"no close", advPrefixed([]byte("---\na: 1\n--")), wire.ErrMalformed},
	}
	for _, c := range cases {
		for _, mk := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.DataErrReader} {
			_, err := wire.NewReader(mk(bytes.NewReader(c.in))).ReadMessage()
			if c.want == io.EOF {
				if err != io.EOF {
					t.Errorf("%s: %v, want io.EOF itself", c.name, err)
				}
				continue
			}
			if got := advSentinels(err); len(got) != 1 || got[0] != c.want {
				t.Errorf("%s: %v matches %v, want %v", c.name, err, got, c.want)
			}
		}
	}
	// A malformed frame is consumed: the next one still reads.
	stream := append(advPrefixed([]byte("---\nbad\n---\n")), good...)
	r := wire.NewReader(bytes.NewReader(stream))
	if _, err := r.ReadMessage(); !errors.Is(err, wire.ErrMalformed) {
		t.Fatal(err)
	}
	if m, err := r.ReadMessage(); err != nil || string(m.Body()) != "body" {
		t.Fatalf("resync: %q %v", m, err)
	}
}

func TestAdvReaderGrowAndReuse(t *testing.T) {
	// Sizes around the internal 32 KiB / 64 KiB thresholds, in an order that
	// shrinks and grows the reused buffer.
	sizes := []int{10, 70000, 20, 65536, 65537, 131072, 131073, 8, 300000, 65535, 5, 1 << 20}
	var stream []byte
	var frames [][]byte
	for i, n := range sizes {
		body := bytes.Repeat([]byte{byte('a' + i)}, max(n, 1))
		m := wire.Empty().WithHeader("i", fmt.Sprint(i)).WithBody(body)
		f, err := wire.AppendFrame(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, f...)
		frames = append(frames, f[4:])
	}
	r := wire.NewReader(iotest.HalfReader(bytes.NewReader(stream)))
	for i := range sizes {
		f, err := r.ReadFrame()
		if err != nil || !bytes.Equal(f, frames[i]) {
			t.Fatalf("frame %d (%d bytes): err %v equal %v", i, len(frames[i]), err, bytes.Equal(f, frames[i]))
		}
		m, err := wire.Decode(f) // Decode copies: the next ReadFrame may reuse f
		if err != nil || m.Value("i") != fmt.Sprint(i) {
			t.Fatalf("decode %d: %v", i, err)
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestAdvWriterKeepsStreamUsableAfterRefusal(t *testing.T) {
	var buf bytes.Buffer
	w := wire.NewWriter(&buf)
	for _, bad := range []*wire.Message{
		wire.Empty().WithHeader("to", "x\ninjected: yes"),
		wire.Empty().WithHeader("", "v"),
		wire.Empty().WithHeader("args", "[oops"),
	} {
		if err := w.WriteMessage(bad); !errors.Is(err, wire.ErrMalformed) {
			t.Fatalf("WriteMessage(%q) = %v", bad, err)
		}
	}
	if w.Buffered() != 0 {
		t.Fatalf("refused message queued %d bytes", w.Buffered())
	}
	if err := w.WriteMessage(wire.Command("p")); err != nil {
		t.Fatal(err)
	}
	_ = w.Flush()
	m, err := wire.NewReader(&buf).ReadMessage()
	if err != nil || m.Value("command") != "p" {
		t.Fatalf("%q %v", m, err)
	}
}

// ------------------------------------------------------- validate / rc

func TestAdvValidate(t *testing.T) {
	m := wire.Empty().
		WithHeader("type", "Request").
		WithHeader("args", "").
		WithHeader("json", "nope").
		WithHeader("rc", "256").
		WithHeader("ttl", "4294967296").
		WithHeader("x-extra", "1")
	ws := wire.Validate(m)
	got := map[string]bool{}
	for _, w := range ws {
		got[w.Header] = true
	}
	for _, h := range []string{"type", "args", "json", "rc", "ttl", "x-extra"} {
		if !got[h] {
			t.Errorf("no warning for %s: %v", h, ws)
		}
	}
	ok := wire.Empty()
	for _, h := range wire.CoreHeaders() {
		ok.Set(h, "x")
	}
	ok.Set("type", "stream")
	ok.Set("args", `{"a":1}`)
	ok.Set("json", "[]")
	ok.Set("rc", "255")
	ok.Set("ttl", "4294967295")
	if ws := wire.Validate(ok); len(ws) != 0 {
		t.Errorf("warnings for a valid message: %v", ws)
	}
	for _, rc := range []string{"-1", "+5", " 5", "5 ", "0x5", "1_0", ""} {
		if len(wire.Validate(wire.Empty().WithHeader("rc", rc))) != 1 {
			t.Errorf("rc %q not warned", rc)
		}
	}
}

func TestAdvResponseRCBands(t *testing.T) {
	resp := func(h ...string) *wire.Message {
		m := wire.New(wire.TypeResponse, "")
		for i := 0; i < len(h); i += 2 {
			m.Set(h[i], h[i+1])
		}
		return m
	}
	cases := []struct {
		msg   *wire.Message
		rc    wire.RC
		isErr bool
	}{
		{resp(), wire.RCSuccess, false},
		{resp("rc", "9"), 9, false},
		{resp("rc", "10"), 10, true},
		{resp("rc", "255"), 255, true},
		{resp("rc", "256"), wire.RCFailure, true},
		{resp("rc", "x"), wire.RCFailure, true},
		{resp("rc", ""), wire.RCFailure, true},
		{nil, wire.RCFailure, true},
	}
	for _, c := range cases {
		if rc := wire.ResponseRC(c.msg); rc != c.rc || rc.IsError() != c.isErr {
			t.Errorf("%q: rc %d", c.msg, rc)
		}
	}
}

// -------------------------------------------------------------- address

func TestAdvAddressForms(t *testing.T) {
	good := map[string]wire.Address{
		"n.bus":       {Node: "n"},
		"s.n":         {Service: "s", Node: "n"},
		"s.n.bus":     {Service: "s", Node: "n"},
		"x.s.n":       {Sub: "x", Service: "s", Node: "n"},
		"x.s.n.bus":   {Sub: "x", Service: "s", Node: "n"},
		"bus.bus":     {Node: "bus"},
		"0.a-b.9":     {Sub: "0", Service: "a-b", Node: "9"},
		"s.bus.bus":   {Service: "s", Node: "bus"},
		"x.s.bus.bus": {Sub: "x", Service: "s", Node: "bus"},
	}
	for in, want := range good {
		a, err := wire.ParseAddress(in)
		if err != nil || a != want {
			t.Errorf("ParseAddress(%q) = %+v %v", in, a, err)
			continue
		}
		if b, err := wire.ParseAddress(a.String()); err != nil || b != a {
			t.Errorf("display %q does not round-trip", a.String())
		}
		tg, err := wire.ParseTarget(in)
		if err != nil || tg.Kind != wire.TargetAddress || tg.Addr != want {
			t.Errorf("ParseTarget(%q) = %+v %v", in, tg, err)
		}
	}
	l63 := strings.Repeat("a", 63)
	bad := []string{"", "s", "bus", ".bus", "s..bus", "s.n.", ".s.n", "a.b.c.d", "a.b.c.d.bus", "S.n", "s_x.n",
		"-s.n", "s-.n", l63 + "a.n", "s.n ", " s.n", "s.n\n", "é.n", "s.n.BUS"}
	for _, in := range bad {
		if a, err := wire.ParseAddress(in); err == nil || !errors.Is(err, wire.ErrBadAddress) {
			t.Errorf("ParseAddress(%q) = %+v %v", in, a, err)
		}
	}
	if _, err := wire.ParseAddress(l63 + "." + l63 + "." + l63 + ".bus"); err != nil {
		t.Errorf("three 63-byte labels: %v", err)
	}
}

func TestAdvTargetForms(t *testing.T) {
	tg, err := wire.ParseTarget("svc")
	if err != nil || tg.Kind != wire.TargetService || tg.Service != "svc" || tg.String() != "svc" {
		t.Fatalf("bare: %+v %v", tg, err)
	}
	tg, err = wire.ParseTarget("s.n@mesh.example")
	if err != nil || tg.Kind != wire.TargetCrossMesh || tg.Addr != (wire.Address{Service: "s", Node: "n"}) || tg.Mesh != "mesh.example" {
		t.Fatalf("cross-mesh: %+v %v", tg, err)
	}
	if tg.String() != "s.n.bus@mesh.example" {
		t.Fatalf("display %q", tg.String())
	}
	for _, in := range []string{"", "@", "s@m.e", "s.n@", "s.n@mesh", "s.n@a@b.c", "s.n@Mesh.e", "s.n@m..e", "s.n@m.e.", "S", "s-", "-s", "s n"} {
		if tg, err := wire.ParseTarget(in); err == nil || !errors.Is(err, wire.ErrBadAddress) {
			t.Errorf("ParseTarget(%q) = %+v %v", in, tg, err)
		}
	}
}
