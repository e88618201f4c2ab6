package wire

import (
	"bytes"
	"testing"
)

// recordingVW is a VectorWriter that keeps what it was given and how.
type recordingVW struct {
	out     bytes.Buffer
	writes  int // Write calls
	vectors int // WriteVector calls
	slices  []int
}

func (v *recordingVW) Write(p []byte) (int, error) {
	v.writes++
	return v.out.Write(p)
}

func (v *recordingVW) WriteVector(bufs [][]byte) (int64, error) {
	v.vectors++
	v.slices = append(v.slices, len(bufs))
	var n int64
	for _, b := range bufs {
		k, _ := v.out.Write(b)
		n += int64(k)
	}
	return n, nil
}

// frameOf is an encoded stream frame with a body of n bytes of c.
func frameOf(t *testing.T, c byte, n int) []byte {
	t.Helper()
	f, err := AppendFrame(nil, New(TypeStream, "c").WithBody(bytes.Repeat([]byte{c}, n)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Direct frames and copied ones, interleaved, leave in one vectored write
// at Flush, in the order they were queued, and Buffered counts them all.
func TestWriterGathersDirectFramesInOrder(t *testing.T) {
	vw := &recordingVW{}
	w := NewWriter(vw)
	var want []byte
	queue := func(f []byte, direct bool) {
		t.Helper()
		var err error
		if direct {
			err = w.WriteDirect(f)
		} else {
			_, err = w.WriteRaw(f)
		}
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, f...)
		if w.Buffered() != len(want) {
			t.Fatalf("Buffered %d, want %d", w.Buffered(), len(want))
		}
	}
	queue(frameOf(t, 'a', 20000), true)
	queue(frameOf(t, 'b', 10), false)
	queue(frameOf(t, 'c', 40000), true) // behind a copied frame, too large to copy
	queue(frameOf(t, 'd', 10), false)
	queue(frameOf(t, 'e', 10), true) // small behind a copied one: copied
	queue(frameOf(t, 'f', 20000), true)
	if vw.writes+vw.vectors != 0 {
		t.Fatalf("wrote before Flush: %d writes, %d vectors", vw.writes, vw.vectors)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if vw.writes != 0 || vw.vectors != 1 {
		t.Fatalf("%d writes and %d vectored writes, want one vectored write", vw.writes, vw.vectors)
	}
	if !bytes.Equal(vw.out.Bytes(), want) {
		t.Fatal("the bytes written differ from the frames queued, in order")
	}
	if w.Buffered() != 0 {
		t.Fatalf("Buffered %d after Flush", w.Buffered())
	}
}

// WriteDirect writes by itself once vectorSlices slices are gathered, and
// not one before.
func TestWriterVectorSlicesAtAndPastItsEdge(t *testing.T) {
	vw := &recordingVW{}
	w := NewWriter(vw)
	f := frameOf(t, 'x', 100)
	for range vectorSlices - 1 {
		if err := w.WriteDirect(f); err != nil {
			t.Fatal(err)
		}
	}
	if vw.vectors != 0 {
		t.Fatalf("wrote at %d slices", vectorSlices-1)
	}
	if err := w.WriteDirect(f); err != nil {
		t.Fatal(err)
	}
	if vw.vectors != 1 || vw.slices[0] != vectorSlices {
		t.Fatalf("%d vectored writes %v at %d slices, want one of %d", vw.vectors, vw.slices, vectorSlices, vectorSlices)
	}
	if w.Buffered() != 0 {
		t.Fatalf("Buffered %d after the write", w.Buffered())
	}
}

// WriteDirect writes by itself once vectorBytes are gathered, and not one
// byte before.
func TestWriterVectorBytesAtAndPastItsEdge(t *testing.T) {
	vw := &recordingVW{}
	w := NewWriter(vw)
	half := make([]byte, vectorBytes/2)
	if err := w.WriteDirect(half); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteDirect(half[:len(half)-1]); err != nil {
		t.Fatal(err)
	}
	if vw.vectors != 0 || w.Buffered() != vectorBytes-1 {
		t.Fatalf("wrote at %d bytes (%d vectors)", vectorBytes-1, vw.vectors)
	}
	if err := w.WriteDirect(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if vw.vectors != 1 || vw.out.Len() != vectorBytes || w.Buffered() != 0 {
		t.Fatalf("%d vectored writes of %d bytes at %d bytes, want one", vw.vectors, vw.out.Len(), vectorBytes)
	}
}

// A writer under a plain io.Writer writes each direct frame as it comes.
func TestWriterWithoutVectorsWritesDirectFramesAtOnce(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	a, b := frameOf(t, 'a', 40000), frameOf(t, 'b', 40000)
	if err := w.WriteDirect(a); err != nil {
		t.Fatal(err)
	}
	if out.Len() != len(a) {
		t.Fatalf("%d bytes out after one direct frame, want %d", out.Len(), len(a))
	}
	if err := w.WriteDirect(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), append(a, b...)) {
		t.Fatal("direct frames out of order")
	}
}

// One direct frame alone leaves in a plain write: there is nothing to
// gather.
func TestWriterWritesALoneDirectFramePlainly(t *testing.T) {
	vw := &recordingVW{}
	w := NewWriter(vw)
	f := frameOf(t, 'a', 40000)
	if err := w.WriteDirect(f); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if vw.writes != 1 || vw.vectors != 0 || !bytes.Equal(vw.out.Bytes(), f) {
		t.Fatalf("%d writes, %d vectored writes, %d bytes", vw.writes, vw.vectors, vw.out.Len())
	}
	if w.Buffered() != 0 {
		t.Fatalf("Buffered %d after Flush", w.Buffered())
	}
}
