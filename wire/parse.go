package wire

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// mode selects how parse treats a defective header line.
type mode uint8

const (
	modePlain   mode = iota // skip silently
	modeLenient             // skip and report
	modeStrict              // fail
)

// ParseReport lists the defects a lenient parse found, in line order: the
// lines it skipped, and the headers it kept despite a defect of their
// value (Defect.Kept).
type ParseReport struct {
	Defects []Defect
}

// Clean reports whether no defect was found.
func (r ParseReport) Clean() bool { return len(r.Defects) == 0 }

// Strings returns one line of text per defect; a header kept despite its
// defect says so.
func (r ParseReport) Strings() []string {
	out := make([]string, len(r.Defects))
	for i, d := range r.Defects {
		out[i] = d.String()
		if d.Kept() {
			out[i] += " (kept, raw)"
		}
	}
	return out
}

// Parse parses a text frame, skipping defective header lines silently and
// keeping, with their raw value, headers whose only defect is their value
// (see DefectKind.OfValue). It fails only on input that is not a frame at
// all (ErrMalformed) or is larger than MaxMessageBytes (ErrTooLarge).
// Trailing whitespace of the body is trimmed.
func Parse(data []byte) (*Message, error) {
	m, _, err := parseText(data, modePlain)
	return m, err
}

// ParseLenient parses a text frame like Parse, and also returns a report of
// every defect it found: each line it skipped, and each header it kept
// with a defective value.
func ParseLenient(data []byte) (*Message, ParseReport, error) {
	m, defects, err := parseText(data, modeLenient)
	return m, ParseReport{Defects: defects}, err
}

// ParseStrict parses a text frame and refuses the first defective header
// line, whether the defect is the line's or the value's, with a
// *ParseError naming the line and the defect.
func ParseStrict(data []byte) (*Message, error) {
	m, _, err := parseText(data, modeStrict)
	return m, err
}

func parseText(data []byte, md mode) (*Message, []Defect, error) {
	if len(data) > MaxMessageBytes {
		return nil, nil, &SizeError{Size: len(data), Limit: MaxMessageBytes}
	}
	hdrEnd, bodyStart, err := split(data)
	if err != nil {
		return nil, nil, err
	}
	m := &Message{}
	defects, err := m.parseHeaders(string(data[len(delim):hdrEnd]), md)
	if err != nil {
		return nil, nil, err
	}
	m.SetBody(bytes.TrimRight(data[bodyStart:], asciiSpace))
	return m, defects, nil
}

const asciiSpace = " \t\r\n\v\f"

// split finds the header block of a frame: it is data[len(delim):hdrEnd] and
// the body starts at bodyStart. The closing delimiter may also be a final
// "---" with no newline, so a frame typed without a trailing newline parses.
func split(data []byte) (hdrEnd, bodyStart int, err error) {
	if !bytes.HasPrefix(data, []byte(delim)) {
		return 0, 0, &ParseError{Line: 1, Kind: DefectStructure, Text: `frame does not start with a "---" line`}
	}
	// data[3] is the opening line's newline, so an empty header block matches too.
	if i := bytes.Index(data[3:], []byte("\n"+delim)); i >= 0 {
		hdrEnd = 3 + i + 1
		return hdrEnd, hdrEnd + len(delim), nil
	}
	if len(data) >= 7 && bytes.HasSuffix(data, []byte("\n---")) {
		return len(data) - 3, len(data), nil
	}
	return 0, 0, &ParseError{Line: 1 + bytes.Count(data, []byte("\n")), Kind: DefectStructure, Text: `no closing "---" line`}
}

// parseHeaders parses the header block hs ("k: v\n" lines), appending to
// m.hdr, which it leaves sorted and unique. Keys and values are substrings
// of hs.
func (m *Message) parseHeaders(hs string, md mode) ([]Defect, error) {
	n := min(strings.Count(hs, "\n"), MaxHeaders)
	m.hdr = slices.Grow(m.hdr[:0], n)
	var (
		defects []Defect
		seen    map[string]struct{} // only once keys arrive out of order
	)
	report := func(d Defect) error {
		if md == modeStrict {
			return (*ParseError)(&d)
		}
		if md == modeLenient {
			defects = append(defects, d)
		}
		return nil
	}
	for lineNo, count := 2, 0; hs != ""; lineNo++ {
		i := strings.IndexByte(hs, '\n')
		line := hs[:i]
		hs = hs[i+1:]
		if count++; count > MaxHeaders {
			if err := report(Defect{Line: lineNo, Kind: DefectTooManyHeaders}); err != nil {
				return nil, err
			}
			break
		}
		k, v, d := splitLine(line)
		if d == DefectNone || d.OfValue() && md != modeStrict {
			// A sound line is kept, even with a defective value; only a
			// repeated key makes it a defect of the line.
			if dup := m.add(k, v, &seen); dup != DefectNone {
				d = dup
			}
		}
		if d != DefectNone {
			if err := report(Defect{Line: lineNo, Kind: d, Text: clip(line)}); err != nil {
				return nil, err
			}
		}
	}
	if seen != nil {
		slices.SortStableFunc(m.hdr, func(a, b header) int { return strings.Compare(a.Key, b.Key) })
	}
	return defects, nil
}

// add appends a header, detecting duplicates. Writers emit sorted headers,
// so the usual case compares with the last key only; out-of-order input
// switches to a set of seen keys.
func (m *Message) add(k, v string, seen *map[string]struct{}) DefectKind {
	if *seen == nil {
		last := len(m.hdr) - 1
		if last < 0 || m.hdr[last].Key < k {
			m.hdr = append(m.hdr, header{k, v})
			return DefectNone
		}
		if m.hdr[last].Key == k {
			return DefectDuplicate
		}
		*seen = make(map[string]struct{}, len(m.hdr)+8)
		for _, h := range m.hdr {
			(*seen)[h.Key] = struct{}{}
		}
	}
	if _, dup := (*seen)[k]; dup {
		return DefectDuplicate
	}
	(*seen)[k] = struct{}{}
	m.hdr = append(m.hdr, header{k, v})
	return DefectNone
}

// splitLine splits "key: value" and checks it.
func splitLine(line string) (k, v string, d DefectKind) {
	if line != "" && (line[0] == ' ' || line[0] == '\t') {
		return "", "", DefectLeadingWhitespace
	}
	i := strings.Index(line, ": ")
	if i < 0 {
		return "", "", DefectMissingSeparator
	}
	k, v = line[:i], line[i+2:]
	return k, v, checkValue(k, v)
}

// checkHeader applies the header rules shared by parsing and Message.Check.
func checkHeader(k, v string) DefectKind {
	if strings.IndexByte(v, '\n') >= 0 {
		return DefectNewlineInValue
	}
	return checkValue(k, v)
}

// checkValue is checkHeader for a value known to hold no newline (one
// split from a line).
func checkValue(k, v string) DefectKind {
	switch {
	case k == "":
		return DefectEmptyKey
	case k[0] == ' ' || k[0] == '\t':
		return DefectLeadingWhitespace
	case !validKey(k):
		return DefectKeyWhitespace
	case !utf8.ValidString(v):
		return DefectInvalidUTF8
	case v != "" && (v[0] == '[' || v[0] == '{') && !json.Valid(unsafe.Slice(unsafe.StringData(v), len(v))):
		return DefectBadJSON
	}
	return DefectNone
}

// validKey reports whether k is valid UTF-8 with no whitespace or control
// characters (ASCII or Unicode: U+0085, U+00A0, U+2028 … are refused).
func validKey(k string) bool {
	for i := 0; i < len(k); {
		c := k[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(k[i:])
		if r == utf8.RuneError && size == 1 || unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
		i += size
	}
	return true
}
