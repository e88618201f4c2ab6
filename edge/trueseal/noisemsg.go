package trueseal

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/flynn/noise"
)

// On the TCP stream every Noise message, handshake or transport, is
// [len: u16 BE][message: len bytes] (trueseal-relay's session transport).

// suite is trueseal's cipher suite: Noise_*_25519_ChaChaPoly_BLAKE2s.
var suite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)

// ErrEmptyMessage is a zero-length Noise message: none of trueseal's is.
var ErrEmptyMessage = errors.New("trueseal: empty noise message")

// readMessage reads one length-prefixed Noise message into buf (grown as
// needed) and returns it.
func readMessage(r io.Reader, buf []byte) ([]byte, error) {
	var head [2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(head[:]))
	if n == 0 {
		return nil, ErrEmptyMessage
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// appendMessage appends msg with its length prefix: one buffer, so it
// goes out in one write. msg is at most MaxNoiseMessage by construction
// (frames are bounded by MaxFrameBytes).
func appendMessage(dst, msg []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}
