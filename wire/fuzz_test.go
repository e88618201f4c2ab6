package wire

// Fuzz targets: parsing, the stream reader fed in pieces, round trips and
// addresses.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"---\n---\n", "---\n---", "---\ncommand: noded.ping\nfrom: probe\nid: 1\nto: noded\ntype: request\n---\n{\"detail\":true}\n",
		"---\n x: y\nbad\n: e\nk k: v\nargs: {\n---\nbody \n", "---\nb: 1\na: 2\na: 3\n---\n", "---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lm, rep, lerr := ParseLenient(data)
		sm, serr := ParseStrict(data)
		pm, perr := Parse(data)
		if (lerr == nil) != (perr == nil) {
			t.Fatalf("lenient err %v, plain err %v", lerr, perr)
		}
		if lerr != nil {
			if serr == nil {
				t.Fatal("strict accepted what lenient refused")
			}
			if !errors.Is(lerr, ErrMalformed) && !errors.Is(lerr, ErrTooLarge) {
				t.Fatalf("untyped error %v", lerr)
			}
			return
		}
		if !lm.Equal(pm) {
			t.Fatal("lenient and plain disagree")
		}
		if (serr == nil) != rep.Clean() {
			t.Fatalf("strict err %v, lenient report %v", serr, rep.Defects)
		}
		if serr == nil && !sm.Equal(lm) {
			t.Fatal("strict and lenient disagree")
		}
		// Whatever a parser accepts is well-formed and round-trips, but for
		// the headers kept with a defective value, which only they spoil.
		kept := 0
		for _, d := range rep.Defects {
			if d.Kept() {
				kept++
			}
		}
		err := lm.Check()
		var pe *ParseError
		if kept == 0 && err != nil || kept > 0 && (!errors.As(err, &pe) || !pe.Kind.OfValue()) {
			t.Fatalf("%d headers kept with a defective value; Check: %v", kept, err)
		}
		again, arep, err := ParseLenient(lm.ToBytes())
		if err != nil || !again.Equal(lm) || len(arep.Defects) != kept {
			t.Fatalf("round trip: %v %v\n%q\n%q", err, arep.Strings(), lm.ToWire(), again)
		}
	})
}

// chunkReader returns its data in pieces whose sizes come from sizes.
type chunkReader struct {
	data, sizes []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[0]) + 1
		c.sizes = c.sizes[1:]
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func FuzzStreamReader(f *testing.F) {
	good, _ := AppendFrame(nil, Command("a").WithBody([]byte{0, 1, 2, ' '}))
	f.Add(good, []byte{0, 3, 200})
	f.Add(append(good, good[:5]...), []byte{1})
	f.Add([]byte{0, 0, 0, 0}, []byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, []byte{})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		r := NewReader(&chunkReader{data: stream, sizes: sizes})
		// ReadFrame, then Decode, on the same bytes read in the same
		// chunks, gives what ReadMessage gives (ReadFrame returns a frame
		// in place in the read buffer; ReadMessage copies it out).
		rf := NewReader(&chunkReader{data: stream, sizes: sizes})
		for range 1000 {
			m, err := r.ReadMessage()
			frame, ferr := rf.ReadFrame()
			var fm *Message
			if ferr == nil {
				fm, ferr = Decode(frame)
			}
			if !sameErrorKind(err, ferr) || (err == nil && !fm.Equal(m)) {
				t.Fatalf("ReadMessage: %v; ReadFrame and Decode: %v", err, ferr)
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrTruncated) {
					t.Fatalf("untyped error %v", err)
				}
				if !errors.Is(err, ErrMalformed) {
					return // out of sync: a broker closes here
				}
				continue
			}
			// What a reader accepts, a writer can send back unchanged.
			out, err := AppendFrame(nil, m)
			if err != nil {
				t.Fatalf("accepted message cannot be written: %v", err)
			}
			back, err := NewReader(bytes.NewReader(out)).ReadMessage()
			if err != nil || !back.Equal(m) {
				t.Fatalf("re-read: %v", err)
			}
		}
	})
}

func FuzzStreamRoundTrip(f *testing.F) {
	f.Add("k", "v", []byte("body \x00\n"))
	f.Fuzz(func(t *testing.T, k, v string, body []byte) {
		m := Empty().WithHeader(k, v).WithBody(body)
		frame, err := AppendFrame(nil, m)
		if err != nil {
			if m.Check() == nil {
				t.Fatalf("AppendFrame refused a message Check accepts: %v", err)
			}
			return
		}
		if binary.BigEndian.Uint32(frame) != uint32(len(frame)-prefixLen) {
			t.Fatal("bad prefix")
		}
		got, err := NewReader(bytes.NewReader(frame)).ReadMessage()
		if err != nil || !got.Equal(m) {
			t.Fatalf("stream round trip: %v", err)
		}
	})
}

func FuzzAddress(f *testing.F) {
	for _, s := range []string{"noded", "alpha.bus", "noded.alpha", "x.noded.alpha.bus", "a.b@c.d", "A.b", "a..b", "-a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			if !errors.Is(err, ErrBadAddress) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := ParseTarget(tg.String())
		if err != nil || again != tg {
			t.Fatalf("display %q does not re-parse to %+v: %+v %v", tg.String(), tg, again, err)
		}
		if a, err := ParseAddress(s); (err == nil) != (tg.Kind == TargetAddress) || (err == nil && a != tg.Addr) {
			t.Fatalf("ParseAddress disagrees: %+v %v", a, err)
		}
	})
}

// sameErrorKind reports whether a and b are both nil, both io.EOF, or
// both of the same one of wire's error kinds.
func sameErrorKind(a, b error) bool {
	for _, kind := range []error{io.EOF, ErrMalformed, ErrTooLarge, ErrTruncated} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return (a == nil) == (b == nil)
}
