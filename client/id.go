package client

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"
)

// Message ids are UUIDs of version 8 (RFC 9562's custom layout): 64
// random bits drawn once per process, then a 64-bit counter, so an id
// costs an atomic add and a hex encoding instead of random bits each —
// ids are made for every message, streams included. They are unique (the
// prefix tells processes apart, the counter messages), not secret: the
// broker matches an answer to a call by the connection it was sent to as
// well as by id, so a guessed id answers nothing.
var (
	idPrefix [8]byte
	idSeq    atomic.Uint64
)

func init() {
	_, _ = crand.Read(idPrefix[:])
	var start [8]byte
	_, _ = crand.Read(start[:])
	idSeq.Store(binary.BigEndian.Uint64(start[:]) >> 2) // room before the counter wraps into the variant bits
}

// newID returns a fresh message id.
func newID() string {
	var s [36]byte
	return string(appendID(s[:0]))
}

// appendID appends a fresh message id to dst:
// pppppppp-pppp-8ppp-Vccc-cccccccccccc (p prefix, c counter, V variant).
func appendID(dst []byte) []byte {
	var u [16]byte
	copy(u[:8], idPrefix[:])
	binary.BigEndian.PutUint64(u[8:], idSeq.Add(1))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // variant 10
	dst = hex.AppendEncode(dst, u[0:4])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[4:6])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[6:8])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[8:10])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, u[10:])
}
