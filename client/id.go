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
	var u [16]byte
	g := ids.Get().(*rand.ChaCha8)
	_, _ = g.Read(u[:])
	ids.Put(g)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
