package moonbridge

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks (MoonBridge's
// Wire.VERSION). A backend announcing another is refused.
const Version = 3

// Frame types (the first byte of a frame).
const (
	TypeHello      byte = 1
	TypeRegister   byte = 2
	TypeRegistered byte = 3
	TypeHeartbeat  byte = 4
	TypePong       byte = 5
	TypeGoodbye    byte = 6
	TypeMessage    byte = 9
	TypeResponse   byte = 10
)

// Limits of the protocol, MoonBridge's own.
const (
	// MaxFrameBytes bounds a frame, its type byte included, the length
	// prefix not (66 KiB).
	MaxFrameBytes = 66 * 1024
	// NonceBytes is the size of HELLO's nonce; SignatureBytes of
	// REGISTER's HMAC-SHA256.
	NonceBytes     = 32
	SignatureBytes = 32
	// MaxRegisterString bounds each REGISTER string as the Java client
	// encodes it; the proxy's own, tighter bounds are below.
	MaxRegisterString = 1024
	MaxInstanceID     = 64
	MaxBackendName    = 128
	MaxGameAddress    = 1024
	MaxGeneration     = 64
	MaxKeyID          = 64
	// MaxChannelBytes bounds a channel name, MaxNodeBytes a backend name
	// in an endpoint, MaxPayloadBytes a payload (64 KiB), MaxDetailBytes
	// an error's detail.
	MaxChannelBytes = 128
	MaxNodeBytes    = 128
	MaxPayloadBytes = 64 * 1024
	MaxDetailBytes  = 1024
	// MaxPublishResults bounds a publication's candidates, the proxy
	// included.
	MaxPublishResults = 256
	// MinTimeoutMillis and MaxTimeoutMillis bound a MESSAGE's timeout.
	MinTimeoutMillis = 1
	MaxTimeoutMillis = 60_000
)

// ReadFrame reads one length-prefixed frame. A length outside
// 1..MaxFrameBytes is an error matching ErrFrameSize, checked before
// anything is allocated; a stream that ends inside a frame is
// io.ErrUnexpectedEOF, and at a frame boundary io.EOF.
func ReadFrame(r io.Reader) ([]byte, error) {
	var p [4]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(p[:])
	if n < 1 || n > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %d", ErrFrameSize, n)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(r, frame); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return frame, nil
}

// AppendFrame appends frame with its length prefix to dst.
func AppendFrame(dst, frame []byte) ([]byte, error) {
	if len(frame) < 1 || len(frame) > MaxFrameBytes {
		return dst, fmt.Errorf("%w: %d", ErrFrameSize, len(frame))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(frame)))
	return append(dst, frame...), nil
}

// WriteFrame writes frame with its length prefix in one Write.
func WriteFrame(w io.Writer, frame []byte) error {
	b, err := AppendFrame(make([]byte, 0, 4+len(frame)), frame)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
