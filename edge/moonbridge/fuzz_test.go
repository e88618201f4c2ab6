package moonbridge

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
)

// FuzzDecode feeds bytes, read as a stream in one-byte pieces, to the
// frame reader and the decoder: nothing panics, every failure is typed,
// and whatever decodes encodes back to the same bytes (the encoding is
// canonical) and decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, g := range goldens(f) {
		frame := h(f, g.frame)
		f.Add(frame)
		var buf bytes.Buffer
		_ = WriteFrame(&buf, frame)
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		r := iotest.OneByteReader(bytes.NewReader(data))
		for {
			frame, err := ReadFrame(r)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrFrameSize) {
					t.Fatalf("ReadFrame: untyped error %v", err)
				}
				return
			}
			checkDecode(t, frame)
		}
	})
}

func checkDecode(t *testing.T, frame []byte) {
	v, err := Decode(frame)
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameSize) {
			t.Fatalf("Decode(%x): untyped error %v", frame, err)
		}
		return
	}
	again, err := encode(v)
	if err != nil {
		t.Fatalf("Decode(%x) gave %#v, which does not encode: %v", frame, v, err)
	}
	if !bytes.Equal(again, frame) {
		t.Fatalf("Decode(%x) re-encodes as %x", frame, again)
	}
	if v2, err := Decode(again); err != nil || !reflect.DeepEqual(v, v2) {
		t.Fatalf("round trip changed %#v into %#v (%v)", v, v2, err)
	}
}
