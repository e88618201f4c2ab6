package wire

// The framed stream: heartbeats, exact bodies, buffer reuse, errors that
// keep the stream in sync or stick, size limits, and writer behaviour.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

func prefixed(text string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(text))), text...)
}

func TestStreamHeartbeatBytes(t *testing.T) {
	got, err := AppendFrame(nil, Empty())
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 0, 0, 8, '-', '-', '-', '\n', '-', '-', '-', '\n'}
	if !bytes.Equal(got, want) {
		t.Fatalf("heartbeat frame = % x", got)
	}
}

func TestStreamRoundTripExactBody(t *testing.T) {
	bodies := [][]byte{
		nil,
		[]byte("trailing whitespace  \n\t\n"),
		{0, 0, 0},
		{0xff, 0xfe, '\n', '-', '-', '-', '\n', 0},
		[]byte("\n---\nk: v\n---\n"),
		bytes.Repeat([]byte{0xAB}, 3*readBufferSize+17),
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var sent []*Message
	for i, b := range bodies {
		m := New(TypeEvent, "ch").WithHeader("id", string(rune('a'+i))).WithBody(b)
		sent = append(sent, m)
		if err := w.WriteMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil || w.Buffered() != 0 {
		t.Fatal(err)
	}
	// One byte at a time exercises every short read.
	r := NewReader(iotest.OneByteReader(bytes.NewReader(buf.Bytes())))
	for _, want := range sent {
		got, err := r.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	}
	if _, err := r.ReadMessage(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestStreamReadFrameReusesBuffer(t *testing.T) {
	big1 := "---\na: 1\n---\n" + strings.Repeat("x", readBufferSize+100)
	big2 := "---\nb: 2\n---\n" + strings.Repeat("y", readBufferSize+50)
	var stream []byte
	for _, s := range []string{big1, "---\n---\n", big2} {
		stream = append(stream, prefixed(s)...)
	}
	r := NewReader(bytes.NewReader(stream))
	f1, _ := r.ReadFrame() // larger than the read buffer: r's own buffer
	p1 := &f1[0]
	small, err := r.ReadFrame() // fits: returned in place from the read buffer
	if err != nil || string(small) != "---\n---\n" {
		t.Fatalf("small frame %q %v", small, err)
	}
	f3, err := r.ReadFrame()
	if err != nil || string(f3) != big2 {
		t.Fatalf("third frame %v", err)
	}
	if &f3[0] != p1 {
		t.Fatal("ReadFrame allocated a new buffer for a frame that fits the old one")
	}
	m, err := Decode(f3)
	if err != nil || m.Value("b") != "2" {
		t.Fatal(err)
	}
	f3[5] = 'X' // Decode copied: the message is unaffected
	if m.Value("b") != "2" {
		t.Fatal("Decode aliases the frame")
	}
}

func TestStreamErrors(t *testing.T) {
	big := binary.BigEndian.AppendUint32(nil, MaxMessageBytes+1)
	cases := []struct {
		name  string
		input []byte
		want  error
	}{
		{"empty stream", nil, io.EOF},
		{"short prefix", []byte{0, 0}, ErrTruncated},
		{"short body", prefixed("---\n---\n")[:9], ErrTruncated},
		{"prefix only", []byte{0, 0, 0, 8}, ErrTruncated},
		{"too large", big, ErrTooLarge},
		{"max uint32", []byte{0xff, 0xff, 0xff, 0xff}, ErrTooLarge},
		{"zero length", []byte{0, 0, 0, 0}, ErrMalformed},
		{"shorter than any frame", prefixed("---\n--"), ErrMalformed},
		{"no opening line", prefixed("hello world"), ErrMalformed},
		{"no closing line", prefixed("---\na: 1\n"), ErrMalformed},
		{"defective header", prefixed("---\nbad\n---\n"), ErrMalformed},
		{"duplicate header", prefixed("---\na: 1\na: 2\n---\n"), ErrMalformed},
		{"bad json header", prefixed("---\nargs: {\n---\n"), ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.input)).ReadMessage()
			if !errors.Is(err, c.want) {
				t.Fatalf("ReadMessage = %v, want %v", err, c.want)
			}
			if c.want == io.EOF {
				return
			}
			_, err = NewReader(bytes.NewReader(c.input)).ReadFrame()
			if c.want != ErrMalformed || c.name == "zero length" || c.name == "shorter than any frame" {
				if !errors.Is(err, c.want) {
					t.Fatalf("ReadFrame = %v, want %v", err, c.want)
				}
			} else if err != nil {
				t.Fatalf("ReadFrame should return the raw frame: %v", err)
			}
		})
	}
}

func TestStreamMalformedFrameKeepsSync(t *testing.T) {
	stream := append(prefixed("---\nbad\n---\n"), prefixed("---\nok: 1\n---\n")...)
	stream = append([]byte{0, 0, 0, 2, 'x', 'y'}, stream...)
	r := NewReader(bytes.NewReader(stream))
	for range 2 {
		if _, err := r.ReadMessage(); !errors.Is(err, ErrMalformed) {
			t.Fatalf("want ErrMalformed, got %v", err)
		}
	}
	m, err := r.ReadMessage()
	if err != nil || m.Value("ok") != "1" {
		t.Fatalf("frame after a malformed one: %v", err)
	}
}

func TestStreamMaxMessageBytes(t *testing.T) {
	head := "---\nk: v\n---\n"
	at := New("", "").WithHeader("k", "v").WithBody(bytes.Repeat([]byte{0}, MaxMessageBytes-len(head)))
	if at.WireLen() != MaxMessageBytes {
		t.Fatalf("WireLen = %d", at.WireLen())
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteMessage(at); err != nil {
		t.Fatalf("write at the limit: %v", err)
	}
	_ = w.Flush()
	got, err := NewReader(&buf).ReadMessage()
	if err != nil || !got.Equal(at) {
		t.Fatalf("read at the limit: %v", err)
	}

	past := at.Clone().WithBody(append(at.Body(), 0))
	if _, err := AppendFrame(nil, past); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("AppendFrame past the limit: %v", err)
	}
	if err := w.WriteMessage(past); !errors.Is(err, ErrTooLarge) || w.Buffered() != 0 {
		t.Fatalf("WriteMessage past the limit: %v, %d buffered", err, w.Buffered())
	}
	// A reader refuses the prefix alone, before reading or allocating.
	r := NewReader(io.MultiReader(bytes.NewReader(binary.BigEndian.AppendUint32(nil, MaxMessageBytes+1)), iotest.ErrReader(errors.New("read past the prefix"))))
	var se *SizeError
	if _, err := r.ReadFrame(); !errors.As(err, &se) || se.Size != MaxMessageBytes+1 {
		t.Fatalf("reader past the limit: %v", err)
	}
}

func TestStreamWriterRefusesInjection(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	bad := New(TypeEvent, "ch").WithHeader("x", "v\nfrom: forged")
	if err := w.WriteMessage(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("WriteMessage = %v", err)
	}
	if w.Buffered() != 0 {
		t.Fatal("a refused message left bytes behind")
	}
	if err := w.WriteMessage(Empty()); err != nil {
		t.Fatal(err)
	}
}

func TestStreamStalledLargeFrameDoesNotAllocateClaim(t *testing.T) {
	// A peer claims the maximum and sends a few bytes: the reader fails with
	// ErrTruncated having allocated about what arrived, not 16 MiB.
	claim := prefixed("---\n---\n" + strings.Repeat("x", 2))
	binary.BigEndian.PutUint32(claim, MaxMessageBytes)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, read := range []func(*Reader) error{
		func(r *Reader) error { _, err := r.ReadFrame(); return err },
		func(r *Reader) error { _, err := r.ReadMessage(); return err },
	} {
		if err := read(NewReader(bytes.NewReader(claim))); !errors.Is(err, ErrTruncated) {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("two stalled reads allocated %d bytes", grew)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestStreamWriterError(t *testing.T) {
	boom := errors.New("boom")
	w := NewWriter(failWriter{boom})
	if err := w.WriteMessage(Empty()); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v", err)
	}
	// Sticky: the peer may hold half a frame, so nothing more is sent.
	if err := w.WriteMessage(Empty()); !errors.Is(err, boom) || w.Buffered() != 0 {
		t.Fatalf("WriteMessage after failure = %v", err)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("second Flush = %v", err)
	}
}

func TestStreamReaderErrorsAreSticky(t *testing.T) {
	deadline := errors.New("i/o timeout")
	good := prefixed("---\n---\n")
	// A transport error in the middle of a frame: later reads must not
	// resume from the middle of it.
	src := io.MultiReader(bytes.NewReader(good[:6]), iotest.ErrReader(deadline))
	r := NewReader(src)
	for range 2 {
		if _, err := r.ReadFrame(); !errors.Is(err, deadline) {
			t.Fatalf("ReadFrame = %v, want the transport error", err)
		}
		if _, err := r.ReadMessage(); !errors.Is(err, deadline) {
			t.Fatalf("ReadMessage = %v, want the transport error", err)
		}
	}
	// ErrTooLarge is sticky; the bytes after the prefix are never read as a frame.
	r = NewReader(bytes.NewReader(append([]byte{0xff, 0xff, 0xff, 0xff}, good...)))
	for range 2 {
		if _, err := r.ReadMessage(); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ReadMessage = %v, want ErrTooLarge", err)
		}
	}
}

func TestStreamWriterFlushesLargeBatches(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	m := Empty().WithBody(bytes.Repeat([]byte("x"), flushBytes))
	if err := w.WriteMessage(m); err != nil {
		t.Fatal(err)
	}
	if w.Buffered() != 0 || buf.Len() != prefixLen+m.WireLen() {
		t.Fatalf("buffered %d, written %d", w.Buffered(), buf.Len())
	}
}

func TestReadFrameZeroAllocs(t *testing.T) {
	one := prefixed("---\ncommand: ch\nid: 1\ntype: event\n---\npayload")
	stream := bytes.Repeat(one, 200)
	br := bytes.NewReader(stream)
	r := NewReader(br)
	_, _ = r.ReadFrame() // warm the buffer
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := r.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadFrame allocates %.1f per frame", allocs)
	}
	m := New(TypeEvent, "ch").WithHeader("id", "1").WithBody([]byte("payload"))
	dst := make([]byte, 0, 256)
	allocs = testing.AllocsPerRun(100, func() {
		dst, _ = AppendFrame(dst[:0], m)
	})
	if allocs != 0 {
		t.Fatalf("AppendFrame allocates %.1f per frame", allocs)
	}
}

func TestAppendFrameWith(t *testing.T) {
	m := New(TypeEvent, "ch").WithHeader("id", "1").WithBody([]byte("b"))
	for _, c := range []struct{ k, v string }{{"ttl", "500"}, {"id", "2"}, {"a", ""}, {"zz", "last"}} {
		got, err := appendFrameWith(nil, m, c.k, c.v)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := AppendFrame(nil, m.Clone().WithHeader(c.k, c.v))
		if !bytes.Equal(got, want) {
			t.Fatalf("with %s=%s:\n%q\nwant\n%q", c.k, c.v, got, want)
		}
	}
	if m.Value("id") != "1" || m.Len() != 3 {
		t.Fatal("appendFrameWith changed the message")
	}
	if _, err := appendFrameWith(nil, m, "ttl", "1\nfrom: x"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("injection through the override: %v", err)
	}
	big := Empty().WithBody(make([]byte, MaxMessageBytes-8))
	if _, err := appendFrameWith(nil, big, "k", "v"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("override past the limit: %v", err)
	}
	dst := make([]byte, 0, 256)
	if a := testing.AllocsPerRun(100, func() { dst, _ = appendFrameWith(dst[:0], m, "ttl", "500") }); a != 0 {
		t.Fatalf("appendFrameWith allocates %.1f", a)
	}
}

func TestFrameReady(t *testing.T) {
	one := prefixed("---\n---\n")
	pr, pw := io.Pipe()
	r := NewReader(pr)
	go func() {
		_, _ = pw.Write(append(one, one[:6]...)) // a whole frame, then part of one
		_, _ = pw.Write(one[6:])
	}()
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if r.FrameReady() {
		t.Fatal("ready with half a frame buffered")
	}
	if _, err := r.ReadFrame(); err != nil { // waits for the rest
		t.Fatal(err)
	}
	_ = pw.Close()
}

func TestReaderSetLimit(t *testing.T) {
	m := New(TypeEvent, "c").WithBody(bytes.Repeat([]byte("x"), 100))
	frame, err := AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	size := len(frame) - 4
	for _, c := range []struct {
		limit int
		ok    bool
	}{{size, true}, {size - 1, false}, {0, true}, {MaxMessageBytes + 1, true}} {
		r := NewReader(bytes.NewReader(frame))
		r.SetLimit(c.limit)
		_, err := r.ReadMessage()
		var se *SizeError
		if c.ok && err != nil || !c.ok && (!errors.Is(err, ErrTooLarge) || !errors.As(err, &se) || se.Limit != c.limit) {
			t.Errorf("limit %d: %v", c.limit, err)
		}
	}
}
