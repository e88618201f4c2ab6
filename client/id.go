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
	idHead   [19]byte // idPrefix as an id's first three groups and their dashes, encoded once
	idSeq    atomic.Uint64
)

func init() {
	_, _ = crand.Read(idPrefix[:])
	idPrefix[6] = idPrefix[6]&0x0f | 0x80 // version 8
	var start [8]byte
	_, _ = crand.Read(start[:])
	idSeq.Store(binary.BigEndian.Uint64(start[:]) >> 2) // room before the counter wraps into the variant bits
	h := hex.AppendEncode(idHead[:0], idPrefix[0:4])
	h = append(h, '-')
	h = hex.AppendEncode(h, idPrefix[4:6])
	h = append(h, '-')
	h = hex.AppendEncode(h, idPrefix[6:8])
	_ = append(h, '-')
}

// newID returns a fresh message id.
func newID() string {
	var s [36]byte
	return string(appendID(s[:0]))
}

const hexDigits = "0123456789abcdef"

// appendID appends a fresh message id to dst:
// pppppppp-pppp-8ppp-Vccc-cccccccccccc (p prefix, c counter, V variant).
// The prefix's text is made once; only the counter is encoded per id.
func appendID(dst []byte) []byte {
	n := idSeq.Add(1)&^(0xc0<<56) | 0x80<<56 // variant 10
	dst = append(dst, idHead[:]...)
	var c [17]byte
	for i := 16; i >= 0; i-- {
		if i == 4 {
			c[i] = '-'
			continue
		}
		c[i] = hexDigits[n&0xf]
		n >>= 4
	}
	return append(dst, c[:]...)
}
