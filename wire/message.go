package wire

import (
	"bytes"
	"iter"
	"slices"
	"strings"
)

// header is one header line: key and value.
type header struct {
	Key, Value string
}

// Message is headers plus a body of bytes. Headers are kept sorted by key
// with at most one value per key, so the wire form is deterministic.
//
// The zero value is an empty message (a heartbeat). Setters mutate the
// message; share a *Message between goroutines only after it is built, and
// use Clone to derive a changed copy.
type Message struct {
	hdr  []header // sorted by Key, keys unique
	body []byte
}

// Empty returns a message with no headers and no body: on the wire it is the
// heartbeat frame "---\n---\n".
func Empty() *Message { return &Message{} }

// New returns a message with the given type and command headers; an empty
// argument leaves that header out.
func New(typ, command string) *Message {
	// The message and room for its usual headers in one allocation: a
	// request or a reply is built header by header.
	b := &struct {
		m Message
		h [newHeaders]header
	}{}
	m := &b.m
	m.hdr = b.h[:0]
	if command != "" {
		m.Set(HeaderCommand, command)
	}
	if typ != "" {
		m.Set(HeaderType, typ)
	}
	return m
}

// newHeaders is the header room New allocates with a message: command,
// type, id, to, from, ttl, reply-to, rc — more grow the slice.
const newHeaders = 8

// Command returns a request for the named command.
func Command(command string) *Message { return New(TypeRequest, command) }

// WithHeader sets a header and returns m, for chaining.
func (m *Message) WithHeader(key, value string) *Message {
	m.Set(key, value)
	return m
}

// WithBody sets the body to a copy of b and returns m, for chaining.
func (m *Message) WithBody(b []byte) *Message {
	m.SetBody(b)
	return m
}

// SetBody sets the body to a copy of b.
func (m *Message) SetBody(b []byte) {
	if len(b) == 0 {
		m.body = nil
		return
	}
	m.body = bytes.Clone(b)
}

// Body returns the body. It is the message's own storage: read it, do not
// modify it.
func (m *Message) Body() []byte { return m.body }

// find returns the index where key is or would be inserted.
func (m *Message) find(key string) (int, bool) {
	return slices.BinarySearchFunc(m.hdr, key, func(h header, k string) int {
		return strings.Compare(h.Key, k)
	})
}

// Set sets key to value, replacing any previous value. Set does not check
// the key or value; Check reports headers that cannot travel on the wire.
func (m *Message) Set(key, value string) {
	i, ok := m.find(key)
	if ok {
		m.hdr[i].Value = value
		return
	}
	m.hdr = slices.Insert(m.hdr, i, header{key, value})
}

// Get returns the value of key and whether it is present.
func (m *Message) Get(key string) (string, bool) {
	if i, ok := m.find(key); ok {
		return m.hdr[i].Value, true
	}
	return "", false
}

// Value returns the value of key, or "" when absent.
func (m *Message) Value(key string) string {
	v, _ := m.Get(key)
	return v
}

// Del removes key.
func (m *Message) Del(key string) {
	if i, ok := m.find(key); ok {
		m.hdr = slices.Delete(m.hdr, i, i+1)
	}
}

// Len returns the number of headers.
func (m *Message) Len() int { return len(m.hdr) }

// Headers iterates over the headers in key order.
func (m *Message) Headers() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, h := range m.hdr {
			if !yield(h.Key, h.Value) {
				return
			}
		}
	}
}

// HeaderMap returns the headers as a new map.
func (m *Message) HeaderMap() map[string]string {
	out := make(map[string]string, len(m.hdr))
	for _, h := range m.hdr {
		out[h.Key] = h.Value
	}
	return out
}

// Clone returns a deep copy of m.
func (m *Message) Clone() *Message {
	return &Message{hdr: slices.Clone(m.hdr), body: bytes.Clone(m.body)}
}

// Equal reports whether m and o have the same headers and body. A nil and an
// empty body are equal.
func (m *Message) Equal(o *Message) bool {
	return slices.Equal(m.hdr, o.hdr) && bytes.Equal(m.body, o.body)
}

// IsHeartbeat reports whether m is the empty frame.
func (m *Message) IsHeartbeat() bool { return len(m.hdr) == 0 && len(m.body) == 0 }

// Check reports the first header that cannot travel on the wire as a
// *ParseError (the rules ParseStrict applies, plus: no newline in a value;
// more than MaxHeaders headers is DefectTooManyHeaders), or a *SizeError when
// the frame would exceed MaxMessageBytes. Writers call it so that a value
// containing a newline can never inject a header.
func (m *Message) Check() error {
	if len(m.hdr) > MaxHeaders {
		return &ParseError{Line: MaxHeaders + 2, Kind: DefectTooManyHeaders}
	}
	for i, h := range m.hdr {
		if d := checkHeader(h.Key, h.Value); d != DefectNone {
			return &ParseError{Line: i + 2, Kind: d, Text: clip(h.Key + ": " + h.Value)}
		}
	}
	if n := m.WireLen(); n > MaxMessageBytes {
		return &SizeError{Size: n, Limit: MaxMessageBytes}
	}
	return nil
}
