package cosmix

// Whatever one WebSocket text message holds, the ingress decoder answers
// with a frame or a *FrameError, never a panic, and a frame it accepts
// encodes to bytes it reads back the same.

import (
	"errors"
	"testing"
)

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		registerFrame, callFrame, "", "---\n---\n", "---\n---", "hello", "---\ncommand: x\n",
		"---\nrc: 10\nerror: boom\n---\n", "---\n a: b\nk:v\n: x\nj: {\n---\nbody", "---\nx: 1\nx: 2\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("%q: error %v is not ErrFrame", data, err)
			}
			return
		}
		if m.Check() != nil {
			return // a header kept raw (lenient) that cannot be written back
		}
		again, err := Decode(Encode(m))
		if err != nil {
			t.Fatalf("%q: encoded %q does not decode: %v", data, Encode(m), err)
		}
		if again.Len() != m.Len() || string(again.Body()) != string(m.Body()) {
			t.Fatalf("%q: read back as %v, was %v", data, again, m)
		}
	})
}
