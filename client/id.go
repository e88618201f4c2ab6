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

// appendID appends a fresh message id to dst:
// pppppppp-pppp-8ppp-Vccc-cccccccccccc (p prefix, c counter, V variant).
// The prefix's text is made once; only the counter is encoded per id.
func appendID(dst []byte) []byte {
	return appendCounter(dst, idSeq.Add(1)&^(0xc0<<56)|0x80<<56) // variant 10
}

// appendCounter appends the id with counter n: idHead, then n as the last
// two groups, cccc-cccccccccccc (16 lower-case hex digits), eight digits
// per word operation: an id is made for every message, and a digit at a
// time was most of its cost. The id is built whole and appended once.
func appendCounter(dst []byte, n uint64) []byte {
	var id [36]byte
	*(*[len(idHead)]byte)(id[:]) = idHead
	c := id[len(idHead):]
	hi := hexWord(uint32(n >> 32))
	binary.BigEndian.PutUint32(c[0:], uint32(hi>>32))
	c[4] = '-'
	binary.BigEndian.PutUint32(c[5:], uint32(hi))
	binary.BigEndian.PutUint64(c[9:], hexWord(uint32(n)))
	return append(dst, id[:]...)
}

// hexWord returns v's eight hex digits as ASCII, the most significant in
// the word's top byte (for a big-endian store).
func hexWord(v uint32) uint64 {
	x := uint64(v)
	// Spread the nibbles out, one per byte, nibble i in byte i.
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f
	// A byte ≥ 10 gets a 1 in this mask; bytes never carry into each
	// other (each stays below 0x100 at every step).
	letters := (x + 0x0606060606060606) >> 4 & 0x0101010101010101
	return x + 0x3030303030303030 + letters*('a'-'0'-10)
}
