package moonbridge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// reader walks a frame's body; the first error sticks.
type reader struct {
	t   byte
	b   []byte
	err error
}

func newReader(frame []byte, t byte) (*reader, error) {
	if len(frame) < 1 || len(frame) > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %d", ErrFrameSize, len(frame))
	}
	if frame[0] != t {
		return nil, malformed(frame[0], "want frame type %d", t)
	}
	return &reader{t: t, b: frame[1:]}, nil
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = malformed(r.t, format, args...)
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.fail("truncated in %s", what)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8(what string) byte {
	if v := r.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16(what string) int {
	if v := r.take(2, what); v != nil {
		return int(binary.BigEndian.Uint16(v))
	}
	return 0
}

func (r *reader) i32(what string) int32 {
	if v := r.take(4, what); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (r *reader) i64(what string) int64 {
	if v := r.take(8, what); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (r *reader) boolean(what string) bool {
	switch v := r.u8(what); v {
	case 0:
		return false
	case 1:
		return true
	default:
		r.fail("%s: boolean byte %d", what, v)
		return false
	}
}

// str reads a string of min..max bytes of valid UTF-8.
func (r *reader) str(what string, min, max int) string {
	n := r.u16(what)
	if r.err == nil && (n < min || n > max) {
		r.fail("%s: length %d outside %d..%d", what, n, min, max)
	}
	v := r.take(n, what)
	if r.err != nil {
		return ""
	}
	if !utf8.Valid(v) {
		r.fail("%s: invalid UTF-8", what)
		return ""
	}
	return string(v)
}

func (r *reader) uuid(what string) (u UUID) {
	copy(u[:], r.take(16, what))
	return u
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// writer builds a frame.
type writer struct{ b []byte }

func newWriter(t byte, size int) *writer {
	w := &writer{b: make([]byte, 1, size)}
	w.b[0] = t
	return w
}

func (w *writer) u8(v byte)   { w.b = append(w.b, v) }
func (w *writer) u16(v int)   { w.b = binary.BigEndian.AppendUint16(w.b, uint16(v)) }
func (w *writer) i32(v int32) { w.b = binary.BigEndian.AppendUint32(w.b, uint32(v)) }
func (w *writer) i64(v int64) { w.b = binary.BigEndian.AppendUint64(w.b, uint64(v)) }
func (w *writer) uuid(u UUID) { w.b = append(w.b, u[:]...) }
func (w *writer) boolean(v bool) {
	if v {
		w.u8(1)
	} else {
		w.u8(0)
	}
}
func (w *writer) str(s string) { w.u16(len(s)); w.b = append(w.b, s...) }

func (w *writer) frame() ([]byte, error) {
	if len(w.b) > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %d", ErrFrameSize, len(w.b))
	}
	return w.b, nil
}

// EncodeHello encodes h.
func EncodeHello(h Hello) []byte {
	w := newWriter(TypeHello, 1+4+NonceBytes)
	w.i32(h.Version)
	w.b = append(w.b, h.Nonce[:]...)
	return w.b
}

// DecodeHello decodes a HELLO frame.
func DecodeHello(frame []byte) (Hello, error) {
	var h Hello
	r, err := newReader(frame, TypeHello)
	if err != nil {
		return h, err
	}
	h.Version = r.i32("version")
	copy(h.Nonce[:], r.take(NonceBytes, "nonce"))
	return h, r.end()
}

// checkRegisterString is the Java client's rule for a REGISTER string:
// 1..MaxRegisterString bytes.
func checkRegisterString(what, s string) error {
	if len(s) == 0 || len(s) > MaxRegisterString || !utf8.ValidString(s) {
		return fmt.Errorf("moonbridge: %s: want 1..%d bytes of UTF-8", what, MaxRegisterString)
	}
	return nil
}

// Canonical is what a registration's HMAC covers after the nonce: the
// five strings, each as a u16 length and its bytes.
func Canonical(instanceID, name, address, generation, keyID string) []byte {
	w := &writer{}
	for _, s := range []string{instanceID, name, address, generation, keyID} {
		w.str(s)
	}
	return w.b
}

// Sign computes a registration's signature: HMAC-SHA256 keyed by secret
// over nonce ‖ Canonical(...).
func Sign(secret []byte, nonce [NonceBytes]byte, r *Register) [SignatureBytes]byte {
	m := hmac.New(sha256.New, secret)
	m.Write(nonce[:])
	m.Write(Canonical(r.InstanceID, r.Name, r.Address, r.Generation, r.KeyID))
	var s [SignatureBytes]byte
	copy(s[:], m.Sum(nil))
	return s
}

// Verify reports, in constant time, whether r's signature is right.
func Verify(secret []byte, nonce [NonceBytes]byte, r *Register) bool {
	want := Sign(secret, nonce, r)
	return hmac.Equal(want[:], r.Signature[:])
}

// EncodeRegister encodes r as the Java client does.
func EncodeRegister(r Register) ([]byte, error) {
	w := newWriter(TypeRegister, 64)
	for _, f := range []struct{ what, s string }{{"instance id", r.InstanceID}, {"backend name", r.Name},
		{"game address", r.Address}, {"generation", r.Generation}, {"key id", r.KeyID}} {
		if err := checkRegisterString(f.what, f.s); err != nil {
			return nil, err
		}
		w.str(f.s)
	}
	w.b = append(w.b, r.Signature[:]...)
	return w.frame()
}

// DecodeRegister decodes a REGISTER frame with the proxy's bounds:
// instance id ≤ 64 bytes, backend name ≤ 128, game address ≤ 1024,
// generation ≤ 64 (and a UUID), key id ≤ 64; none empty.
func DecodeRegister(frame []byte) (Register, error) {
	var g Register
	r, err := newReader(frame, TypeRegister)
	if err != nil {
		return g, err
	}
	g.InstanceID = r.str("instance id", 1, MaxInstanceID)
	g.Name = r.str("backend name", 1, MaxBackendName)
	g.Address = r.str("game address", 1, MaxGameAddress)
	g.Generation = r.str("generation", 1, MaxGeneration)
	g.KeyID = r.str("key id", 1, MaxKeyID)
	copy(g.Signature[:], r.take(SignatureBytes, "signature"))
	if err := r.end(); err != nil {
		return g, err
	}
	if !javaUUID(g.Generation) {
		return g, malformed(TypeRegister, "generation %q is not a UUID", clip(g.Generation))
	}
	return g, nil
}

// javaUUID reports whether java.util.UUID.fromString accepts s the way
// the proxy checks a generation: five '-'-separated groups of 1..16 hex
// digits (the canonical 8-4-4-4-12 is one case).
func javaUUID(s string) bool {
	groups, n := 1, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-':
			if n == 0 {
				return false
			}
			groups, n = groups+1, 0
		case c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			if n++; n > 16 {
				return false
			}
		default:
			return false
		}
	}
	return groups == 5 && n > 0
}

// EncodeRegistered encodes r.
func EncodeRegistered(r Registered) ([]byte, error) {
	if r.Epoch < 0 {
		return nil, fmt.Errorf("moonbridge: negative backend epoch %d", r.Epoch)
	}
	w := newWriter(TypeRegistered, 25)
	w.i64(r.Epoch)
	w.uuid(r.ProxyEpoch)
	return w.b, nil
}

// DecodeRegistered decodes a REGISTERED frame.
func DecodeRegistered(frame []byte) (Registered, error) {
	var g Registered
	r, err := newReader(frame, TypeRegistered)
	if err != nil {
		return g, err
	}
	g.Epoch = r.i64("epoch")
	g.ProxyEpoch = r.uuid("proxy epoch")
	if err := r.end(); err != nil {
		return g, err
	}
	if g.Epoch < 0 {
		return g, malformed(TypeRegistered, "negative epoch")
	}
	return g, nil
}

// EncodeEmpty is a HEARTBEAT, PONG or GOODBYE frame.
func EncodeEmpty(t byte) []byte { return []byte{t} }

// DecodeEmpty checks that frame is exactly a t frame with no body.
func DecodeEmpty(frame []byte, t byte) error {
	r, err := newReader(frame, t)
	if err != nil {
		return err
	}
	return r.end()
}
