package hotpath

import (
	"bytes"
	"testing"

	"busbar/wire"
)

func TestAppendEvent(t *testing.T) {
	out, off := AppendEvent(nil, wire.TypeStream, "orders.created", []byte("id-1"), []byte("body \x00"), true)
	PatchTTL(out[off:], 250)
	got, err := wire.NewReader(bytes.NewReader(out)).ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	want := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "id-1").WithHeader(wire.HeaderTTL, "0000000250").WithBody([]byte("body \x00"))
	if !got.Equal(want) {
		t.Fatalf("%q", got)
	}
	plain, off := AppendEvent(nil, wire.TypeStream, "c", []byte("i"), nil, false)
	if got, err := wire.NewReader(bytes.NewReader(plain)).ReadMessage(); err != nil || off != -1 || got.Value(wire.HeaderTTL) != "" || got.Len() != 3 {
		t.Fatalf("without ttl: %v %d %q", err, off, got)
	}
	dst := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { dst, _ = AppendEvent(dst[:0], wire.TypeStream, "c", []byte("i"), nil, true) }); a != 0 {
		t.Fatalf("%.1f allocs", a)
	}
}
