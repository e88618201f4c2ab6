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
