package trueseal

import (
	"bytes"
	"testing"
)

// FuzzParseFrame feeds the frame decoder what a peer could put in a
// transport message's plaintext (after the handshake: the plaintext of
// an authenticated message; before it, FuzzNoiseMessage covers the
// length-prefixed reader). A frame that parses must encode back to the
// same bytes, and its fixed heads must parse without panicking.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 0})
	f.Add(AppendFrame(nil, Push, make([]byte, 40)))
	f.Add(AppendFrame(nil, DeliverAck, make([]byte, 8)))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		typ, body, err := ParseFrame(p)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendFrame(nil, typ, body), p) {
			t.Fatalf("%x does not encode back", p)
		}
		_, _, _ = ParsePush(body)
		_, _, _ = ParseBlobID(body)
	})
}
