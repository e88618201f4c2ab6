package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// pieceReader returns its bytes at most chunk at a time.
type pieceReader struct {
	b     []byte
	chunk int
}

func (c *pieceReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// The buffer doubles after each read that filled it, up to maxReadBuffer
// and no further.
func TestReadBufferGrowsWhileReadsFillIt(t *testing.T) {
	src := &pieceReader{b: make([]byte, 1<<20), chunk: 1 << 20}
	b := newReadBuffer(src)
	want := []int{2 * readBufferSize, maxReadBuffer, maxReadBuffer}
	for i, w := range want {
		if _, err := b.Discard(b.Buffered()); err != nil {
			t.Fatal(err)
		}
		b.fill()
		if len(b.buf) != w {
			t.Fatalf("after full read %d: size %d, want %d", i+1, len(b.buf), w)
		}
	}
}

// After shrinkAfter short reads in a row, and not one before, a grown
// buffer goes back to readBufferSize; a read that is not short starts the
// count again.
func TestReadBufferShrinksAfterARunOfShortReads(t *testing.T) {
	src := &pieceReader{b: make([]byte, 4<<20), chunk: 1 << 20}
	b := newReadBuffer(src)
	b.fill() // full: grows
	if len(b.buf) != 2*readBufferSize {
		t.Fatalf("size %d after a full read", len(b.buf))
	}
	shortRun := func(n int) {
		t.Helper()
		for range n {
			if _, err := b.Discard(b.Buffered()); err != nil {
				t.Fatal(err)
			}
			b.fill()
		}
	}
	src.chunk = shortRead - 1
	shortRun(shrinkAfter - 1)
	if len(b.buf) != 2*readBufferSize {
		t.Fatalf("shrank to %d after %d short reads", len(b.buf), shrinkAfter-1)
	}
	src.chunk = shortRead // one read that is not short
	shortRun(1)
	src.chunk = shortRead - 1
	shortRun(shrinkAfter - 1)
	if len(b.buf) != 2*readBufferSize {
		t.Fatalf("shrank to %d: a read of shortRead bytes should restart the count", len(b.buf))
	}
	shortRun(1)
	if len(b.buf) != readBufferSize {
		t.Fatalf("size %d after %d short reads in a row, want %d", len(b.buf), shrinkAfter, readBufferSize)
	}
}

// Frames up to maxReadBuffer are returned in place from the grown buffer,
// larger ones through the copy; both are read exactly, in any chunking.
func TestReadFrameAtAndPastMaxReadBuffer(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	sizes := []int{10, maxReadBuffer - 200, 10, maxReadBuffer + 1000, 10}
	var want [][]byte
	for i, n := range sizes {
		body := bytes.Repeat([]byte{byte('a' + i)}, n)
		m := New(TypeStream, "c").WithBody(body)
		if err := w.WriteMessage(m); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	frames := stream.Bytes()
	for _, chunk := range []int{1 << 20, 7000, 1} {
		r := NewReader(&pieceReader{b: bytes.Clone(frames), chunk: chunk})
		for i := range sizes {
			m, err := r.ReadMessage()
			if err != nil {
				t.Fatalf("chunk %d, frame %d: %v", chunk, i, err)
			}
			if !bytes.Equal(m.Body(), want[i]) {
				t.Fatalf("chunk %d, frame %d: body of %d bytes differs", chunk, i, len(m.Body()))
			}
		}
		if _, err := r.ReadFrame(); !errors.Is(err, io.EOF) {
			t.Fatalf("chunk %d: after the last frame: %v", chunk, err)
		}
		if got := len(r.br.buf); got > maxReadBuffer {
			t.Fatalf("chunk %d: buffer grew to %d, past maxReadBuffer", chunk, got)
		}
	}
}

// A frame as large as maxReadBuffer read in place allocates nothing.
func TestReadFrameInPlaceAtMaxReadBufferAllocatesNothing(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	m := New(TypeStream, "c").WithBody(make([]byte, maxReadBuffer-100))
	for range 50 {
		if err := w.WriteMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(stream.Bytes()))
	if _, err := r.ReadFrame(); err != nil { // grows the buffer once
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(40, func() {
		if _, err := r.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per frame", allocs)
	}
}

// A Reader limited to frames no larger than readBufferSize (a broker's
// before login) keeps its buffer at that size however fast the peer
// sends; a larger limit lets it grow again.
func TestReaderWithASmallLimitKeepsItsBuffer(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	m := New(TypeStream, "c").WithBody(make([]byte, 1000))
	for range 1000 {
		if err := w.WriteMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ limit, want int }{
		{readBufferSize, readBufferSize},
		{readBufferSize + 1, maxReadBuffer},
	} {
		r := NewReader(bytes.NewReader(stream.Bytes()))
		r.SetLimit(tc.limit)
		for i := range 100 {
			if _, err := r.ReadFrame(); err != nil {
				t.Fatalf("limit %d, frame %d: %v", tc.limit, i, err)
			}
		}
		if got := len(r.br.buf); got != tc.want {
			t.Fatalf("limit %d: buffer of %d bytes, want %d", tc.limit, got, tc.want)
		}
	}
}
