package wire

// cosmix's lenient rule, per defect kind and parse mode: a defect of the
// line skips the line; a defect of the value (a JSON-shaped value that is
// not JSON) keeps the header with its raw value. Strict refuses both.

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestDefectOfLineSkippedDefectOfValueKept(t *testing.T) {
	cases := []struct {
		kind  DefectKind
		lines []string // header lines; the defective one is the last
		kept  bool     // the defective line's header is in the message
	}{
		{DefectLeadingWhitespace, []string{" k: v"}, false},
		{DefectMissingSeparator, []string{"k:v"}, false},
		{DefectEmptyKey, []string{": v"}, false},
		{DefectKeyWhitespace, []string{"k k: v"}, false},
		{DefectBadJSON, []string{`k: {"a":`}, true},
		{DefectBadJSON, []string{"k: [1,"}, true},
		{DefectBadJSON, []string{"args: {nope}"}, true},
		{DefectDuplicate, []string{"k: 1", "k: 2"}, false}, // the first "k" stays; this line goes
		{DefectInvalidUTF8, []string{"k: \xff"}, false},    // not text: no header to keep
	}
	covered := map[DefectKind]bool{}
	for _, c := range cases {
		covered[c.kind] = true
		if c.kind.OfValue() != c.kept {
			t.Errorf("%v: OfValue() = %v, want %v", c.kind, c.kind.OfValue(), c.kept)
		}
		lines := append([]string{"a: 1"}, c.lines...)
		lines = append(lines, "z: 2")
		data := frame("{}", lines...)
		line := len(lines) // line 1 is "---"; the defective line precedes "z: 2"
		bad := c.lines[len(c.lines)-1]
		want := Empty().WithHeader("a", "1").WithHeader("z", "2").WithBody([]byte("{}"))
		for _, l := range c.lines[:len(c.lines)-1] {
			k, v, _ := strings.Cut(l, ": ")
			want.Set(k, v)
		}
		if c.kept {
			k, v, _ := strings.Cut(bad, ": ")
			want.Set(k, v)
		}

		_, err := ParseStrict(data)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Kind != c.kind || pe.Line != line {
			t.Errorf("strict %q: %v, want %v on line %d", bad, err, c.kind, line)
		}

		m, rep, err := ParseLenient(data)
		if err != nil || !m.Equal(want) {
			t.Errorf("lenient %q: %q %v, want %q", bad, m, err, want)
		}
		if len(rep.Defects) != 1 || rep.Defects[0].Kind != c.kind || rep.Defects[0].Line != line || rep.Defects[0].Kept() != c.kept {
			t.Errorf("lenient %q report: %+v", bad, rep.Defects)
		} else if got := rep.Strings()[0]; strings.HasSuffix(got, "(kept, raw)") != c.kept {
			t.Errorf("lenient %q report text %q", bad, got)
		}

		p, err := Parse(data)
		if err != nil || !p.Equal(want) {
			t.Errorf("plain %q: %q %v, want %q", bad, p, err, want)
		}
	}

	// Past MaxHeaders the rest of the block is skipped: a defect of the block.
	lines := make([]string, MaxHeaders+1)
	for i := range lines {
		lines[i] = "h" + strconv.Itoa(i) + ": v"
	}
	lines[MaxHeaders] = "last: {" // a JSON-shaped defect past the limit is still skipped
	m, rep, err := ParseLenient(frame("", lines...))
	if err != nil || m.Len() != MaxHeaders || len(rep.Defects) != 1 || rep.Defects[0].Kind != DefectTooManyHeaders || rep.Defects[0].Kept() {
		t.Errorf("too many headers: %d headers, %v, %v", m.Len(), rep.Strings(), err)
	}
	covered[DefectTooManyHeaders] = true
	// Not line defects at all: structure refuses the frame in every mode,
	// and a newline in a value is only seen by Message.Check.
	if _, _, err := ParseLenient([]byte("---\nk: {\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("no closing line: %v", err)
	}
	if err := Empty().WithHeader("k", "{\n}").Check(); err == nil {
		t.Error("Check accepted a newline in a value")
	}
	covered[DefectStructure], covered[DefectNewlineInValue], covered[DefectNone] = true, true, true
	for k := DefectNone; int(k) < len(defectText); k++ {
		if !covered[k] {
			t.Errorf("defect kind %v is not classified by this test", k)
		}
	}
}

// A header kept with a defective value is the first of its key: a later
// valid line with the key is the duplicate; a defective value on a
// repeated key is skipped as a duplicate.
func TestKeptValueAndDuplicates(t *testing.T) {
	m, rep, err := ParseLenient([]byte("---\nk: {\nk: {}\n---\n"))
	if err != nil || m.Value("k") != "{" || len(rep.Defects) != 2 ||
		rep.Defects[0].Kind != DefectBadJSON || rep.Defects[1].Kind != DefectDuplicate {
		t.Fatalf("%q %v %v", m, rep.Strings(), err)
	}
	m, rep, err = ParseLenient([]byte("---\nk: {}\nk: {\n---\n"))
	if err != nil || m.Value("k") != "{}" || len(rep.Defects) != 1 || rep.Defects[0].Kind != DefectDuplicate {
		t.Fatalf("%q %v %v", m, rep.Strings(), err)
	}
	// What was kept raw cannot be sent on until it is fixed: a busbar
	// peer's stream reader is strict.
	if _, err := AppendFrame(nil, m.WithHeader("j", "[")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a writer sent a defective value: %v", err)
	}
}
