package wire

import (
	"encoding/binary"
	"io"
)

// appendFrameWith appends m as a stream frame like AppendFrame, with the
// header key set to value in the copy on the wire only.
func appendFrameWith(dst []byte, m *Message, key, value string) ([]byte, error) {
	if err := m.Check(); err != nil {
		return dst, err
	}
	if d := checkHeader(key, value); d != DefectNone {
		return dst, &ParseError{Line: 0, Kind: d, Text: clip(key + ": " + value)}
	}
	i, found := m.find(key)
	n := m.WireLen() + len(key) + len(": ") + len(value) + 1
	if found {
		n -= len(m.hdr[i].Key) + len(": ") + len(m.hdr[i].Value) + 1
	}
	if n > MaxMessageBytes {
		return dst, &SizeError{Size: n, Limit: MaxMessageBytes}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, delim...)
	dst = appendHeaders(dst, m.hdr[:i])
	dst = appendHeader(dst, key, value)
	if found {
		i++
	}
	dst = appendHeaders(dst, m.hdr[i:])
	dst = append(dst, delim...)
	return append(dst, m.body...), nil
}

func appendHeader(dst []byte, k, v string) []byte {
	dst = append(dst, k...)
	dst = append(dst, ": "...)
	dst = append(dst, v...)
	return append(dst, '\n')
}

func appendHeaders(dst []byte, hs []header) []byte {
	for _, h := range hs {
		dst = appendHeader(dst, h.Key, h.Value)
	}
	return dst
}

// WriteMessageWith queues m like WriteMessage, with key set to value in the
// copy on the wire only. It lets a sender stamp a per-destination header
// (the remaining ttl at write time) on a message shared by several queues
// without copying or mutating it.
func (w *Writer) WriteMessageWith(m *Message, key, value string) error {
	if w.err != nil {
		return w.err
	}
	buf, err := appendFrameWith(w.buf, m, key, value)
	w.buf = buf
	if err != nil {
		return err
	}
	if len(w.buf) >= flushBytes {
		return w.Flush()
	}
	return nil
}

// WriteRaw queues an already encoded stream frame (prefix included) and
// returns the bytes it occupies in the writer's buffer, which the caller
// may patch (a ttl stamped at write time) until its next call. The frame
// is not checked: it must be one the peer's Reader accepts, as AppendFrame
// writes them.
func (w *Writer) WriteRaw(frame []byte) ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	if len(w.buf) > 0 && len(w.buf)+len(frame) > flushBytes {
		if err := w.Flush(); err != nil {
			return nil, err
		}
	}
	start := len(w.buf)
	w.buf = append(w.buf, frame...)
	return w.buf[start:], nil
}

// WriteDirect queues encoded frames (prefix included, several back to back
// allowed) after what is already queued, like WriteRaw, but without copying
// them when it can: small b behind buffered frames is copied, saving a
// write; otherwise b goes to the underlying writer as it is, so a sender
// that encoded into a buffer of its own (a connection's pending batch)
// saves the copy. When that writer is a VectorWriter, b is queued by
// reference and written with what is buffered at the next Flush, in one
// call — by WriteDirect itself once vectorBytes or vectorSlices are
// queued — so the caller keeps b unchanged until then; otherwise the
// buffered bytes are flushed and b is written at once. b is not checked;
// errors are sticky as for every write.
func (w *Writer) WriteDirect(b []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > w.mark && len(w.buf)+len(b) <= flushBytes {
		w.buf = append(w.buf, b...)
		return nil
	}
	if w.vw == nil {
		if err := w.Flush(); err != nil {
			return err
		}
		_, w.err = w.w.Write(b)
		return w.err
	}
	if w.mark < len(w.buf) {
		w.vec = append(w.vec, w.buf[w.mark:])
		w.vecBytes += len(w.buf) - w.mark
		w.mark = len(w.buf)
	}
	w.vec = append(w.vec, b)
	w.vecBytes += len(b)
	if w.vecBytes >= vectorBytes || len(w.vec) >= vectorSlices {
		return w.Flush()
	}
	return nil
}

// VectorWriter is an io.Writer that also writes several slices in one
// call, in order, as if they were one (writev on a socket). It must not
// keep bufs, or modify the bytes, after it returns.
type VectorWriter interface {
	io.Writer
	WriteVector(bufs [][]byte) (int64, error)
}

// What WriteDirect gathers for one vectored write: a write of up to
// vectorBytes bytes in up to vectorSlices slices costs one system call
// where each slice cost one, and is still small enough that a writer
// waiting on a slow peer records progress often (sendq frees a batch's
// room as its writes complete).
const (
	vectorBytes  = 128 << 10
	vectorSlices = 64
)
