package wire

const delim = "---\n"

// WireLen returns the length of m's text form, which is also the length a
// stream frame carries in its prefix.
func (m *Message) WireLen() int {
	n := 2*len(delim) + len(m.body)
	for _, h := range m.hdr {
		n += len(h.Key) + len(": ") + len(h.Value) + 1
	}
	return n
}

// AppendWire appends m's text form to dst: "---\n", one "key: value\n" line
// per header in key order, "---\n", then the body unchanged.
func (m *Message) AppendWire(dst []byte) []byte {
	dst = append(dst, delim...)
	dst = appendHeaders(dst, m.hdr)
	dst = append(dst, delim...)
	return append(dst, m.body...)
}

// ToBytes returns m's text form (to_bytes).
func (m *Message) ToBytes() []byte { return m.AppendWire(make([]byte, 0, m.WireLen())) }

// ToWire returns m's text form as a string (to_wire).
func (m *Message) ToWire() string { return string(m.ToBytes()) }

// String returns the text form, for logs and debugging.
func (m *Message) String() string { return m.ToWire() }
