package hotpath

import (
	"testing"

	"busbar/wire"
)

// ForwardLen says exactly how long AppendForward's frame is, with and
// without a ttl, for frames with and without from and ttl of their own,
// an empty body, and a closing line without its newline.
func TestForwardLenIsWhatAppendForwardAppends(t *testing.T) {
	frames := [][]byte{
		wire.New(wire.TypeStream, "ch").WithBody([]byte("payload")).ToBytes(),
		wire.New(wire.TypeStream, "ch").WithHeader(wire.HeaderFrom, "someone.else").WithHeader(wire.HeaderTTL, "1500").WithBody([]byte("x")).ToBytes(),
		wire.New(wire.TypeStream, "ch").WithHeader(wire.HeaderID, "7").WithHeader(wire.HeaderTo, "n").ToBytes(),
		[]byte("---\ncommand: ch\ntype: stream\n---"),
		[]byte("---\ncommand: ch\nfrom: a\nttl: 5\ntype: stream\n---\n"),
	}
	for _, frame := range frames {
		var v View
		if err := ParseView(frame, &v); err != nil {
			t.Fatalf("%q: %v", frame, err)
		}
		for _, withTTL := range []bool{false, true} {
			n, ok := ForwardLen(&v, "pub.1", withTTL)
			got, _ := AppendForward([]byte("before"), &v, "pub.1", withTTL)
			if !ok || n != len(got)-len("before") {
				t.Errorf("%q withTTL %v: ForwardLen %d %v, AppendForward appended %d", frame, withTTL, n, ok, len(got)-len("before"))
			}
		}
	}
	// Unsorted headers: not known without appending.
	var v View
	if err := ParseView([]byte("---\ntype: stream\ncommand: ch\n---\n"), &v); err != nil {
		t.Fatal(err)
	}
	if _, ok := ForwardLen(&v, "p", true); ok {
		t.Fatal("ForwardLen claimed to know the length for unsorted headers")
	}
}
