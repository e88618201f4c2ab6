package wire

// The cost of reading, writing, parsing and forwarding frames.

import (
	"bytes"
	"io"
	"testing"
)

func benchMessage(size int) *Message {
	return New(TypeEvent, "orders.created").WithHeader("id", "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader("from", "billing.alpha.bus").WithBody(bytes.Repeat([]byte("x"), size))
}

// loopReader replays one stream forever without allocating.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func benchStream(b *testing.B, size int) *Reader {
	frame, err := AppendFrame(nil, benchMessage(size))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	return NewReader(&loopReader{data: frame})
}

func BenchmarkReadFrame128(b *testing.B) {
	r := benchStream(b, 128)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReadFrame(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadMessage128(b *testing.B) {
	r := benchStream(b, 128)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadMessage16K(b *testing.B) {
	r := benchStream(b, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteMessage128(b *testing.B) {
	m := benchMessage(128)
	w := NewWriter(io.Discard)
	b.SetBytes(int64(prefixLen + m.WireLen()))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.WriteMessage(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStrict128(b *testing.B) {
	data := benchMessage(128).ToBytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseStrict(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseTarget(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseTarget("sub.service.node.bus"); err != nil {
			b.Fatal(err)
		}
	}
}
