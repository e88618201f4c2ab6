package client

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"sync"
)

// ids draws message ids from ChaCha8 generators seeded from the operating
// system: unpredictable like crypto/rand, without a system call per id.
var ids = sync.Pool{New: func() any {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	return rand.NewChaCha8(seed)
}}

// newID returns a random (version 4) UUID: every message gets one.
func newID() string {
	var s [36]byte
	return string(appendID(s[:0]))
}

// appendID appends a random (version 4) UUID to dst.
func appendID(dst []byte) []byte {
	var u [16]byte
	g := ids.Get().(*rand.ChaCha8)
	_, _ = g.Read(u[:])
	ids.Put(g)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
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
