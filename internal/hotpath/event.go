package hotpath

import (
	"encoding/binary"

	"busbar/wire"
)

// AppendEvent appends a stream frame with the headers command, id, a ttl
// slot (TTLWidth zeros, for PatchTTL; only when withTTL) and type, in key
// order, then body; it returns the offset of the ttl digits (-1 without).
// It is the allocation-free encoder of a client's Emit: the caller
// guarantees command and id are valid header values (a checked channel
// name, a generated id) and the frame fits wire.MaxMessageBytes —
// AppendEvent checks neither.
func AppendEvent(dst []byte, typ, command string, id []byte, body []byte, withTTL bool) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, delim...)
	dst = appendHeader(dst, wire.HeaderCommand, command)
	dst = append(dst, wire.HeaderID+": "...)
	dst = append(dst, id...)
	dst = append(dst, '\n')
	off := -1
	if withTTL {
		dst = append(dst, wire.HeaderTTL+": "...)
		off = len(dst)
		dst = append(dst, ttlSlot...)
	}
	dst = appendHeader(dst, wire.HeaderType, typ)
	dst = append(dst, delim...)
	dst = append(dst, body...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-prefixLen))
	return dst, off
}

// EventLen is how many bytes AppendEvent appends, length prefix included.
func EventLen(typ, command string, idLen, bodyLen int, withTTL bool) int {
	n := prefixLen + 2*len(delim) + len(wire.HeaderCommand+": \n") + len(command) +
		len(wire.HeaderID+": \n") + idLen + len(wire.HeaderType+": \n") + len(typ) + bodyLen
	if withTTL {
		n += len(wire.HeaderTTL+": ") + len(ttlSlot)
	}
	return n
}

// Fields are the headers of a frame AppendFields encodes; empty values
// are left out. The caller guarantees every value is a valid header value
// (a checked channel name, a generated id, a parsed address, a decimal
// rc): AppendFields checks none, nor the frame's size.
type Fields struct {
	Type, Command, ID, To, ReplyTo, RC, Result, Error string
	TTL                                               bool // a ttl slot of TTLWidth zeros, for PatchTTL
}

// AppendFields appends a stream frame with f's headers, in key order, then
// body; it returns the offset in dst of the ttl digits (-1 without). It is
// the allocation-free encoder of a client's requests and replies, as
// AppendEvent is of Emit.
func AppendFields(dst []byte, f *Fields, body []byte) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, delim...)
	dst = appendOptional(dst, wire.HeaderCommand, f.Command)
	dst = appendOptional(dst, wire.HeaderError, f.Error)
	dst = appendOptional(dst, wire.HeaderID, f.ID)
	dst = appendOptional(dst, wire.HeaderRC, f.RC)
	dst = appendOptional(dst, wire.HeaderReplyTo, f.ReplyTo)
	dst = appendOptional(dst, wire.HeaderResult, f.Result)
	dst = appendOptional(dst, wire.HeaderTo, f.To)
	off := -1
	if f.TTL {
		dst = append(dst, wire.HeaderTTL+": "...)
		off = len(dst)
		dst = append(dst, ttlSlot...)
	}
	dst = appendOptional(dst, wire.HeaderType, f.Type)
	dst = append(dst, delim...)
	dst = append(dst, body...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-prefixLen))
	return dst, off
}

// FrameLen is how many bytes AppendFields appends for f and a body of
// bodyLen bytes, length prefix included.
func (f *Fields) FrameLen(bodyLen int) int {
	n := prefixLen + 2*len(delim) + bodyLen
	for _, v := range [...]struct{ k, v string }{
		{wire.HeaderCommand, f.Command}, {wire.HeaderError, f.Error}, {wire.HeaderID, f.ID},
		{wire.HeaderRC, f.RC}, {wire.HeaderReplyTo, f.ReplyTo}, {wire.HeaderResult, f.Result},
		{wire.HeaderTo, f.To}, {wire.HeaderType, f.Type},
	} {
		if v.v != "" {
			n += len(v.k) + len(": ") + len(v.v) + 1
		}
	}
	if f.TTL {
		n += len(wire.HeaderTTL) + len(": ") + len(ttlSlot)
	}
	return n
}

func appendOptional(dst []byte, k, v string) []byte {
	if v == "" {
		return dst
	}
	return appendHeader(dst, k, v)
}
