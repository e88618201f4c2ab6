package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sentinel errors. Every error the parsers, Reader, Writer and Check return
// matches exactly one of them with errors.Is (or is io.EOF, or the
// transport's own error), so a broker can map it to a reply and decide
// whether the connection survives. Address errors match ErrBadAddress.
var (
	// ErrTooLarge: a frame exceeds MaxMessageBytes. On a stream the frame was
	// not consumed, so the stream is out of sync and must be closed.
	ErrTooLarge = errors.New("wire: frame too large")
	// ErrTruncated: the stream ended inside a frame.
	ErrTruncated = errors.New("wire: truncated frame")
	// ErrMalformed: the bytes are not a conforming frame.
	ErrMalformed = errors.New("wire: malformed frame")
)

// DefectKind names what is wrong with one header line.
type DefectKind uint8

// The defect kinds. Every defect is refused by ParseStrict. ParseLenient
// (which lists each in its report) and Parse tell two sorts apart, after
// cosmix's rule: a defect of the line (the line is not a sound "key:
// value" header, or repeats a key) skips the line; a defect of the value
// (DefectBadJSON, see OfValue) keeps the header with its raw value.
const (
	DefectNone              DefectKind = iota
	DefectLeadingWhitespace            // line starts with a space or tab
	DefectMissingSeparator             // no ": " between key and value
	DefectEmptyKey                     // ": " at the start of the line
	DefectKeyWhitespace                // whitespace, a control character or invalid UTF-8 in the key
	DefectBadJSON                      // value starts with '[' or '{' but is not valid JSON
	DefectDuplicate                    // key already seen; the first value is kept
	DefectTooManyHeaders               // more than MaxHeaders lines; the rest are ignored
	DefectNewlineInValue               // value contains '\n' (only Message.Check sees this)
	DefectInvalidUTF8                  // value is not valid UTF-8 (headers are text; bodies are bytes)
	DefectStructure                    // no opening or closing "---" line
)

var defectText = [...]string{
	DefectNone:              "no defect",
	DefectLeadingWhitespace: "header line starts with whitespace",
	DefectMissingSeparator:  `header line has no ": " separator`,
	DefectEmptyKey:          "header key is empty",
	DefectKeyWhitespace:     "header key contains whitespace, a control character or invalid UTF-8",
	DefectBadJSON:           "header value looks like JSON but is not valid JSON",
	DefectDuplicate:         "duplicate header key; the first value is kept",
	DefectTooManyHeaders:    fmt.Sprintf("more than %d header lines; the rest of the header block is ignored", MaxHeaders),
	DefectNewlineInValue:    "header value contains a newline",
	DefectInvalidUTF8:       "header value is not valid UTF-8",
	DefectStructure:         "frame structure",
}

// OfValue reports whether k is a defect of a header's value rather than
// of its line: the line's syntax is sound, so a lenient or plain parse
// keeps the header with its raw value. Only DefectBadJSON is: invalid
// UTF-8 is a defect of the line, since a header is text and a kept value
// must be one a writer can send.
func (k DefectKind) OfValue() bool { return k == DefectBadJSON }

func (k DefectKind) String() string {
	if int(k) < len(defectText) {
		return defectText[k]
	}
	return fmt.Sprintf("defect(%d)", uint8(k))
}

// Defect is one problem found in a frame: which line (1-based, counting the
// opening "---" as line 1), what kind, and the line itself (clipped).
type Defect struct {
	Line int
	Kind DefectKind
	Text string
}

func (d Defect) String() string {
	if d.Text == "" {
		return fmt.Sprintf("line %d: %s", d.Line, d.Kind)
	}
	return fmt.Sprintf("line %d: %s: %q", d.Line, d.Kind, d.Text)
}

// Kept reports whether a lenient or plain parse kept the header this
// defect was found in (with its raw value), rather than skipping the line.
func (d Defect) Kept() bool { return d.Kind.OfValue() }

// ParseError is a defect that made a strict parse, a stream read or a write
// fail. It matches ErrMalformed.
type ParseError Defect

func (e *ParseError) Error() string { return "wire: malformed frame: " + Defect(*e).String() }

// Unwrap makes errors.Is(err, ErrMalformed) true.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// SizeError reports a frame larger than the limit. It matches ErrTooLarge.
type SizeError struct {
	Size, Limit int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("wire: frame too large: %d bytes, limit %d", e.Size, e.Limit)
}

// Unwrap makes errors.Is(err, ErrTooLarge) true.
func (e *SizeError) Unwrap() error { return ErrTooLarge }

// maxDefectText bounds how much of a bad line a Defect quotes.
const maxDefectText = 80

func clip(s string) string {
	if len(s) <= maxDefectText {
		return s
	}
	cut := maxDefectText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
