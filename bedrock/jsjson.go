package bedrock

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// JavaScript strings are sequences of UTF-16 code units, and may hold lone
// surrogates (a JavaScript sender slicing a string can split a pair).
// These helpers handle such strings as []uint16 and write JSON exactly as
// JSON.stringify does: '"', '\\' and the control characters escaped (\b
// \t \n \f \r by name, the others as \u00xx), lone surrogates as \udxxx
// (lowercase hex), and nothing else — no HTML escaping, U+2028 and U+2029
// as they are. Because every lone surrogate is escaped, the JSON text
// itself is always valid UTF-8.

// units returns s as UTF-16 code units (s is valid UTF-8: Go strings made
// by this package or decoded from JSON text).
func units(s string) []uint16 { return utf16.Encode([]rune(s)) }

// len16 is the length of s in UTF-16 code units, JavaScript's length.
func len16(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

const hexDigits = "0123456789abcdef"

func appendU(dst []byte, u uint16) []byte {
	return append(dst, '\\', 'u', hexDigits[u>>12], hexDigits[u>>8&15], hexDigits[u>>4&15], hexDigits[u&15])
}

// appendQuoted appends s as JSON.stringify quotes a string.
func appendQuoted(dst []byte, s []uint16) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		u := s[i]
		switch {
		case u == '"':
			dst = append(dst, '\\', '"')
		case u == '\\':
			dst = append(dst, '\\', '\\')
		case u == '\b':
			dst = append(dst, '\\', 'b')
		case u == '\t':
			dst = append(dst, '\\', 't')
		case u == '\n':
			dst = append(dst, '\\', 'n')
		case u == '\f':
			dst = append(dst, '\\', 'f')
		case u == '\r':
			dst = append(dst, '\\', 'r')
		case u < 0x20:
			dst = appendU(dst, u)
		case utf16.IsSurrogate(rune(u)):
			if u < 0xdc00 && i+1 < len(s) && s[i+1] >= 0xdc00 && s[i+1] <= 0xdfff { // a pair
				dst = utf8.AppendRune(dst, utf16.DecodeRune(rune(u), rune(s[i+1])))
				i++
			} else {
				dst = appendU(dst, u) // lone
			}
		default:
			dst = utf8.AppendRune(dst, rune(u))
		}
	}
	return append(dst, '"')
}

// appendQuotedString is appendQuoted for a Go string.
func appendQuotedString(dst []byte, s string) []byte { return appendQuoted(dst, units(s)) }

var errBadString = errors.New("malformed JSON string")

// unquote16 decodes the JSON string at the start of b (b[0] is '"') into
// code units, keeping lone surrogates as they are, and returns how many
// bytes it took.
func unquote16(b []byte) ([]uint16, int, error) {
	if len(b) == 0 || b[0] != '"' {
		return nil, 0, errBadString
	}
	out := make([]uint16, 0, len(b))
	for i := 1; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return out, i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return nil, 0, errBadString
			}
			switch b[i+1] {
			case '"', '\\', '/':
				out = append(out, uint16(b[i+1]))
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				if i+6 > len(b) {
					return nil, 0, errBadString
				}
				v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
				if err != nil {
					return nil, 0, errBadString
				}
				out = append(out, uint16(v))
				i += 6
				continue
			default:
				return nil, 0, errBadString
			}
			i += 2
		case c < 0x20:
			return nil, 0, errBadString
		case c < utf8.RuneSelf:
			out = append(out, uint16(c))
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, 0, errBadString
			}
			out = utf16.AppendRune(out, r)
			i += size
		}
	}
	return nil, 0, errBadString
}

// stringOf is the Go string of code units; a lone surrogate becomes
// U+FFFD (Go strings are UTF-8). Where lone surrogates must survive, keep
// the []uint16.
func stringOf(s []uint16) string { return string(utf16.Decode(s)) }

// canonical rewrites the valid JSON text b as JSON.stringify(JSON.parse(b))
// would: no whitespace, every string re-quoted JavaScript's way (lone
// surrogates kept). Numbers, literals and key order are kept as written
// (JavaScript would also re-format numbers and put integer-like keys
// first; JSON.parse reads either form to the same value).
func canonical(dst, b []byte) ([]byte, error) {
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			s, n, err := unquote16(b[i:])
			if err != nil {
				return nil, err
			}
			dst = appendQuoted(dst, s)
			i += n
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst, nil
}
