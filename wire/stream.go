package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// Stream framing: each frame is a 4-byte big-endian length N followed by N
// bytes of text form (header block, then the body byte-exact). N counts the
// text form only and is at most MaxMessageBytes. The heartbeat is
//
//	00 00 00 08  2d 2d 2d 0a 2d 2d 2d 0a    ("---\n---\n")
const prefixLen = 4

// minFrame is the shortest text form: "---\n---".
const minFrame = 7

// Buffer sizes for readers and writers. A buffer that grew past
// retainBytes for one large frame is dropped afterwards, so an idle
// connection does not pin up to MaxMessageBytes.
const (
	readBufferSize = 32 << 10
	flushBytes     = 32 << 10
	retainBytes    = 64 << 10
)

// Reader reads length-prefixed frames from a byte stream.
type Reader struct {
	br     *readBuffer
	prefix [prefixLen]byte
	buf    []byte // reused by ReadFrame
	err    error  // sticky: set once the stream is out of sync or ended
	limit  int    // largest frame accepted; 0: MaxMessageBytes
}

// SetLimit lowers the largest frame r accepts below MaxMessageBytes (a
// broker sets its payload limit plus room for headers): a longer one is a
// *SizeError (ErrTooLarge) before any of it is read. n ≤ 0 or over
// MaxMessageBytes means MaxMessageBytes. A limit of at most
// readBufferSize (32 KiB) also keeps the read buffer from growing past
// that size (a broker's limit before login).
func (r *Reader) SetLimit(n int) {
	if n <= 0 || n > MaxMessageBytes {
		n = 0
	}
	r.limit = n
	r.br.most = maxReadBuffer
	if n > 0 && n <= readBufferSize { // frames this small gain nothing from more
		r.br.most = readBufferSize
	}
}

// NewReader returns a Reader that buffers r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: newReadBuffer(r)}
}

// next reads a length prefix and checks it against the limits before
// anything is allocated.
func (r *Reader) next() (int, error) {
	if _, err := io.ReadFull(r.br, r.prefix[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w: stream ended inside the length prefix", ErrTruncated)
		}
		return 0, err // io.EOF at a frame boundary, or the transport's error
	}
	n := binary.BigEndian.Uint32(r.prefix[:])
	limit := MaxMessageBytes
	if r.limit > 0 {
		limit = r.limit
	}
	if int64(n) > int64(limit) {
		return 0, &SizeError{Size: int(n), Limit: limit}
	}
	if n < minFrame {
		// Consume the bytes so the stream stays in sync.
		if _, err := r.br.Discard(int(n)); err != nil {
			return 0, truncated(err, int(n))
		}
		return 0, &ParseError{Line: 1, Kind: DefectStructure, Text: fmt.Sprintf("%d-byte frame is shorter than %d", n, minFrame)}
	}
	return int(n), nil
}

// read reads an n-byte frame into buf (reusing its capacity) and returns
// it. Past retainBytes the buffer grows as bytes arrive, never to what the
// prefix merely claims, so a peer that announces 16 MiB and stalls pins
// little memory.
func (r *Reader) read(buf []byte, n int) ([]byte, error) {
	if n > cap(buf) {
		buf = make([]byte, 0, min(n, retainBytes))
	}
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		chunk := buf[len(buf):min(cap(buf), n)]
		if _, err := io.ReadFull(r.br, chunk); err != nil {
			return nil, truncated(err, n)
		}
		buf = buf[:len(buf)+len(chunk)]
	}
	return buf, nil
}

// FrameReady reports whether a whole next frame is already buffered, so
// the next ReadFrame will not wait on the transport.
func (r *Reader) FrameReady() bool {
	n := r.br.Buffered()
	if n < prefixLen {
		return false
	}
	p, err := r.br.Peek(prefixLen)
	return err == nil && n >= prefixLen+int(binary.BigEndian.Uint32(p))
}

// truncated turns an end of stream inside an n-byte frame into ErrTruncated
// and passes any other error (a deadline, a reset) through unchanged.
func truncated(err error, n int) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: stream ended inside a %d-byte frame", ErrTruncated, n)
	}
	return err
}

// fail records err as sticky unless the stream is still in sync (a
// malformed frame was consumed whole), and returns it.
func (r *Reader) fail(err error) error {
	if !errors.Is(err, ErrMalformed) {
		r.err = err
	}
	return err
}

// ReadFrame reads the next frame and returns its text form without
// decoding it. The slice is only valid until the next read from r (it may
// be r's read buffer itself). It returns
// io.EOF at a clean end of stream; ErrTruncated, ErrTooLarge or ErrMalformed
// (wrapped) or the transport's error otherwise. Only ErrMalformed leaves the
// stream in sync; after any other error the stream is unusable and every
// later call returns the same error.
func (r *Reader) ReadFrame() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	n, err := r.next()
	if err != nil {
		return nil, r.fail(err)
	}
	// A frame that fits the read buffer (grown for it if need be) is
	// returned in place: no copy. The bytes stay put until the next read
	// refills the buffer.
	if n <= r.br.most {
		frame, err := r.br.Peek(n)
		if err != nil {
			return nil, r.fail(truncated(err, n))
		}
		_, _ = r.br.Discard(n)
		return frame, nil
	}
	frame, err := r.read(r.buf, n)
	if err != nil {
		return nil, r.fail(err)
	}
	if cap(frame) <= retainBytes {
		r.buf = frame // reuse; a larger buffer is not kept
	}
	return frame, nil
}

// ReadMessage reads and decodes the next frame (see Decode); errors are as
// for ReadFrame. The message owns its memory: headers and body share one
// allocation holding the frame, so keeping any header string keeps the whole
// frame alive; strings.Clone a value kept longer than the message.
func (r *Reader) ReadMessage() (*Message, error) {
	if r.err != nil {
		return nil, r.err
	}
	n, err := r.next()
	if err != nil {
		return nil, r.fail(err)
	}
	frame, err := r.read(nil, n)
	if err != nil {
		return nil, r.fail(err)
	}
	return decodeOwned(frame)
}

// Decode decodes a stream frame's text form (as returned by ReadFrame) into
// a new Message. Header lines are checked strictly: a peer that sends a
// defective line gets a *ParseError. The body is kept byte-exact, not
// trimmed. Decode copies frame, so the caller may reuse it.
func Decode(frame []byte) (*Message, error) {
	if len(frame) > MaxMessageBytes {
		return nil, &SizeError{Size: len(frame), Limit: MaxMessageBytes}
	}
	return decodeOwned(append([]byte(nil), frame...))
}

// decodeOwned decodes a frame that no one else references and that is never
// written again: header strings alias its header block and the body is the
// tail of it (capacity clipped, so appending to the body reallocates).
func decodeOwned(frame []byte) (*Message, error) {
	hdrEnd, bodyStart, err := split(frame)
	if err != nil {
		return nil, err
	}
	m := &Message{}
	if hdrEnd > len(delim) {
		hs := unsafe.String(&frame[len(delim)], hdrEnd-len(delim))
		if _, err := m.parseHeaders(hs, modeStrict); err != nil {
			return nil, err
		}
	}
	if bodyStart < len(frame) {
		m.body = frame[bodyStart:len(frame):len(frame)]
	}
	return m, nil
}

// AppendFrame appends m as a stream frame (length prefix and text form) to
// dst. It refuses, with the error Check returns, a message that the peer's
// reader would refuse.
func AppendFrame(dst []byte, m *Message) ([]byte, error) {
	if err := m.Check(); err != nil {
		return dst, err
	}
	n := m.WireLen()
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	return m.AppendWire(dst), nil
}

// Writer writes length-prefixed frames to a byte stream. Frames are batched
// in memory: call Flush to send them. WriteMessage flushes by itself once
// flushBytes are pending. A write error is sticky: the peer may have seen
// part of a frame, so every later call returns it.
type Writer struct {
	w   io.Writer
	vw  VectorWriter // w, when it writes several slices in one call; nil otherwise
	buf []byte
	err error

	// With vw: slices WriteDirect queued without a copy, and the pieces of
	// buf between them, in order; Flush writes them in one call. buf[:mark]
	// is in vec already, and vecBytes is what vec holds.
	vec      [][]byte
	vecBytes int
	mark     int
}

// NewWriter returns a Writer on w. When w is a VectorWriter, frames
// WriteDirect queues are gathered and written together (see WriteDirect).
func NewWriter(w io.Writer) *Writer {
	vw, _ := w.(VectorWriter)
	return &Writer{w: w, vw: vw}
}

// WriteMessage queues m as one frame. A message Check refuses is not queued
// and its error returned; the stream stays usable.
func (w *Writer) WriteMessage(m *Message) error {
	if w.err != nil {
		return w.err
	}
	buf, err := AppendFrame(w.buf, m)
	w.buf = buf
	if err != nil {
		return err
	}
	if len(w.buf) >= flushBytes {
		return w.Flush()
	}
	return nil
}

// Buffered returns the number of bytes queued and not yet flushed.
func (w *Writer) Buffered() int { return len(w.buf) - w.mark + w.vecBytes }

// Flush writes every queued frame to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	var err error
	switch {
	case len(w.vec) == 1 && w.mark == len(w.buf): // one slice: a plain write
		_, err = w.w.Write(w.vec[0])
		w.vec[0] = nil
		w.vec, w.vecBytes, w.mark = w.vec[:0], 0, 0
	case len(w.vec) > 0:
		if w.mark < len(w.buf) {
			w.vec = append(w.vec, w.buf[w.mark:])
		}
		_, err = w.vw.WriteVector(w.vec)
		clear(w.vec) // the slices are the caller's again
		w.vec, w.vecBytes, w.mark = w.vec[:0], 0, 0
	case len(w.buf) > 0:
		_, err = w.w.Write(w.buf)
	default:
		return nil
	}
	if cap(w.buf) > retainBytes {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	w.err = err
	return err
}
