package seal

import (
	"encoding/binary"
	"unicode"
	"unicode/utf8"
)

// reader decodes a byte slice field by field. The first short read sets
// err and every later call returns zero values, so a decoder reads all its
// fields and checks err once.
type reader struct {
	b    []byte
	off  int
	what string // the format, for error messages
	err  error
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = malformed("%s: truncated in %s", r.what, field)
		return nil
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8(field string) byte {
	if p := r.take(1, field); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if p := r.take(4, field); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64(field string) uint64 {
	if p := r.take(8, field); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// short reads a length byte and that many bytes, refusing a length over
// max.
func (r *reader) short(max int, field string) []byte {
	n := int(r.u8(field + " length"))
	if r.err == nil && n > max {
		r.err = malformed("%s: %s of %d bytes, at most %d", r.what, field, n, max)
		return nil
	}
	return r.take(n, field)
}

// fail records the first error.
func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// end fails on trailing bytes and returns the first error.
func (r *reader) end() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = malformed("%s: %d trailing bytes", r.what, len(r.b)-r.off)
	}
	return r.err
}

func putShort(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

// ValidGroupName reports whether name is a group name: 1 to
// MaxGroupNameLen bytes of [A-Za-z0-9._-], starting with a letter or digit.
func ValidGroupName(name string) bool {
	if len(name) == 0 || len(name) > MaxGroupNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// ValidLabel reports whether label is a member label: at most MaxLabelLen
// bytes of UTF-8 with no control characters. The empty label is valid.
func ValidLabel(label string) bool {
	if len(label) > MaxLabelLen || !utf8.ValidString(label) {
		return false
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
