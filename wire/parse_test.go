package wire

// Parsing text frames: every defect reported in order, valid frames,
// duplicates, header and size limits, and round trips.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// frame builds a text frame from header lines and a body.
func frame(body string, lines ...string) []byte {
	var b strings.Builder
	b.WriteString("---\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString("---\n" + body)
	return []byte(b.String())
}

func TestParseDefects(t *testing.T) {
	cases := []struct {
		name string
		line string
		kind DefectKind
	}{
		{"leading space", " type: event", DefectLeadingWhitespace},
		{"leading tab", "\ttype: event", DefectLeadingWhitespace},
		{"no separator", "type event", DefectMissingSeparator},
		{"colon without space", "type:event", DefectMissingSeparator},
		{"colon at end", "type:", DefectMissingSeparator},
		{"empty line", "", DefectMissingSeparator},
		{"empty key", ": event", DefectEmptyKey},
		{"space in key", "ty pe: event", DefectKeyWhitespace},
		{"tab in key", "ty\tpe: event", DefectKeyWhitespace},
		{"control in key", "ty\x01pe: event", DefectKeyWhitespace},
		{"bad json object", `args: {"a":`, DefectBadJSON},
		{"bad json array", "json: [1,2", DefectBadJSON},
		{"bad json any header", "x-meta: {nope}", DefectBadJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := frame("body", "id: 7", c.line, "type: event")
			wantDefect := Defect{Line: 3, Kind: c.kind, Text: c.line}

			_, err := ParseStrict(data)
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("strict: err = %v, want *ParseError", err)
			}
			if Defect(*pe) != wantDefect {
				t.Fatalf("strict: %+v, want %+v", *pe, wantDefect)
			}
			if !strings.Contains(err.Error(), "line 3") {
				t.Fatalf("strict error does not say where: %v", err)
			}

			m, rep, err := ParseLenient(data)
			if err != nil {
				t.Fatalf("lenient: %v", err)
			}
			if len(rep.Defects) != 1 || rep.Defects[0] != wantDefect {
				t.Fatalf("lenient report = %+v, want [%+v]", rep.Defects, wantDefect)
			}
			if rep.Clean() || len(rep.Strings()) != 1 {
				t.Fatal("report claims clean")
			}
			want := Empty().WithHeader("id", "7").WithHeader("type", "event").WithBody([]byte("body"))
			if c.kind.OfValue() { // a defect of the value: the header is kept, raw
				k, v, _ := strings.Cut(c.line, ": ")
				want.Set(k, v)
			}
			if !m.Equal(want) {
				t.Fatalf("lenient: %q, want %q", m.ToWire(), want.ToWire())
			}

			pm, err := Parse(data)
			if err != nil || !pm.Equal(want) {
				t.Fatalf("plain: %v %q", err, pm)
			}
		})
	}
}

func TestParseValidFrames(t *testing.T) {
	cases := []struct {
		name string
		in   string
		hdr  map[string]string
		body string
	}{
		{"heartbeat", "---\n---\n", map[string]string{}, ""},
		{"heartbeat no final newline", "---\n---", map[string]string{}, ""},
		{"headers no final newline", "---\na: 1\n---", map[string]string{"a": "1"}, ""},
		{"seed example", "---\ncommand: noded.ping\nfrom: probe\nid: 1\nto: noded\ntype: request\n---\n{\"detail\":true}\n",
			map[string]string{"command": "noded.ping", "from": "probe", "id": "1", "to": "noded", "type": "request"}, `{"detail":true}`},
		{"empty value", "---\nerror: \n---\n", map[string]string{"error": ""}, ""},
		{"value keeps spaces and colons", "---\nk:  a: b \n---\n", map[string]string{"k": " a: b "}, ""},
		{"colon in key", "---\nx:y: z\n---\n", map[string]string{"x:y": "z"}, ""},
		{"utf8 key and value", "---\nclé: ☃\n---\n", map[string]string{"clé": "☃"}, ""},
		{"valid json values", "---\nargs: [1, {\"a\": null}]\njson: {}\n---\n", map[string]string{"args": `[1, {"a": null}]`, "json": "{}"}, ""},
		{"unsorted input is sorted", "---\ntype: event\nid: 1\nbus: 1\n---\n", map[string]string{"type": "event", "id": "1", "bus": "1"}, ""},
		{"body trailing whitespace trimmed", "---\n---\nhello \t\r\n\n", map[string]string{}, "hello"},
		{"body leading whitespace kept", "---\n---\n\n  hello", map[string]string{}, "\n  hello"},
		{"body may hold delimiters", "---\na: 1\n---\nx\n---\nb: 2\n---\n", map[string]string{"a": "1"}, "x\n---\nb: 2\n---"},
		{"CR is part of a value", "---\na: 1\r\n---\n", map[string]string{"a": "1\r"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for name, parse := range map[string]func([]byte) (*Message, error){"strict": ParseStrict, "plain": Parse} {
				m, err := parse([]byte(c.in))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got := m.HeaderMap(); fmt.Sprint(got) != fmt.Sprint(c.hdr) {
					t.Fatalf("%s: headers = %v, want %v", name, got, c.hdr)
				}
				if string(m.Body()) != c.body {
					t.Fatalf("%s: body = %q, want %q", name, m.Body(), c.body)
				}
			}
		})
	}
}

func TestParseStructuralErrors(t *testing.T) {
	for _, in := range []string{
		"", "--", "---", "---\n", "----\n---\n", " ---\n---\n", "\n---\n---\n",
		"---\na: 1\n", "---\na: 1\n--- \n", "---\r\n---\r\n", "hello",
	} {
		for name, parse := range map[string]func([]byte) (*Message, error){
			"strict": ParseStrict, "plain": Parse,
			"lenient": func(b []byte) (*Message, error) { m, _, err := ParseLenient(b); return m, err },
		} {
			m, err := parse([]byte(in))
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Kind != DefectStructure || m != nil {
				t.Errorf("%s(%q) = %v, %v; want a structure error", name, in, m, err)
			}
		}
	}
}

func TestParseDuplicates(t *testing.T) {
	// Sorted input (the usual case) and unsorted input take different paths.
	for _, lines := range [][]string{
		{"a: first", "a: second", "b: x"},
		{"b: x", "a: first", "a: second"},
	} {
		data := frame("", lines...)
		if _, err := ParseStrict(data); !errors.Is(err, ErrMalformed) {
			t.Fatalf("strict accepted a duplicate: %v", err)
		}
		m, rep, err := ParseLenient(data)
		if err != nil || m.Value("a") != "first" || m.Len() != 2 {
			t.Fatalf("lenient: %v %v", err, m.HeaderMap())
		}
		if len(rep.Defects) != 1 || rep.Defects[0].Kind != DefectDuplicate {
			t.Fatalf("report = %v", rep.Defects)
		}
	}
}

func TestParseReportsEveryDefectInOrder(t *testing.T) {
	data := frame("", "bad", "a: 1", " lead", ": e", "a: 2", "k k: v")
	_, rep, err := ParseLenient(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Defect{
		{2, DefectMissingSeparator, "bad"},
		{4, DefectLeadingWhitespace, " lead"},
		{5, DefectEmptyKey, ": e"},
		{6, DefectDuplicate, "a: 2"},
		{7, DefectKeyWhitespace, "k k: v"},
	}
	if fmt.Sprint(rep.Defects) != fmt.Sprint(want) {
		t.Fatalf("report:\n%v\nwant\n%v", rep.Defects, want)
	}
	// Strict stops at the first.
	_, err = ParseStrict(data)
	if pe := (*ParseError)(nil); !errors.As(err, &pe) || pe.Line != 2 {
		t.Fatalf("strict: %v", err)
	}
}

func headerLines(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("h%05d: %d", i, i)
	}
	return lines
}

func TestParseMaxHeaders(t *testing.T) {
	at := frame("body", headerLines(MaxHeaders)...)
	m, err := ParseStrict(at)
	if err != nil || m.Len() != MaxHeaders || string(m.Body()) != "body" {
		t.Fatalf("at the limit: %v, %d headers", err, m.Len())
	}

	past := frame("body", headerLines(MaxHeaders+1)...)
	_, err = ParseStrict(past)
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Kind != DefectTooManyHeaders || pe.Line != MaxHeaders+2 {
		t.Fatalf("past the limit, strict: %v", err)
	}
	m, rep, err := ParseLenient(past)
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != MaxHeaders || string(m.Body()) != "body" {
		t.Fatalf("past the limit, lenient kept %d headers, body %q", m.Len(), m.Body())
	}
	if len(rep.Defects) != 1 || rep.Defects[0].Kind != DefectTooManyHeaders {
		t.Fatalf("report = %v", rep.Defects)
	}
	// Parsing stops: a defect after the limit is not reported.
	more := frame("", append(headerLines(MaxHeaders+1), "bad line")...)
	if _, rep, _ := ParseLenient(more); len(rep.Defects) != 1 {
		t.Fatalf("defects after the limit were parsed: %v", rep.Defects)
	}
}

func TestParseMaxMessageBytes(t *testing.T) {
	head := "---\nk: v\n---\n"
	at := []byte(head + strings.Repeat("x", MaxMessageBytes-len(head)))
	m, err := ParseStrict(at)
	if err != nil || len(m.Body()) != MaxMessageBytes-len(head) {
		t.Fatalf("at the limit: %v", err)
	}
	past := append(at, 'x')
	for _, parse := range []func([]byte) (*Message, error){ParseStrict, Parse} {
		_, err := parse(past)
		var se *SizeError
		if !errors.As(err, &se) || !errors.Is(err, ErrTooLarge) || se.Size != MaxMessageBytes+1 || se.Limit != MaxMessageBytes {
			t.Fatalf("past the limit: %v", err)
		}
	}
}

func TestParseCopiesInput(t *testing.T) {
	data := frame("body", "k: v")
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'X'
	}
	if m.Value("k") != "v" || string(m.Body()) != "body" {
		t.Fatal("parsed message aliases the input")
	}
}

func TestTextRoundTrip(t *testing.T) {
	msgs := []*Message{
		Empty(),
		Command("a.b").WithHeader("id", "1"),
		New(TypeEvent, "ch").WithHeader("args", `{"x":[1,2]}`).WithBody([]byte("  leading kept\nlines\n---\nx")),
		Empty().WithHeader("k", " spaced value ").WithHeader("z:", ": v"),
	}
	for _, m := range msgs {
		got, err := ParseStrict(m.ToBytes())
		if err != nil || !got.Equal(m) {
			t.Fatalf("round trip of %q: %v %q", m.ToWire(), err, got)
		}
	}
	if !bytes.Equal(Empty().ToBytes(), []byte("---\n---\n")) {
		t.Fatal("heartbeat bytes")
	}
}
