package hotpath

import (
	"bytes"
	"testing"

	"busbar/wire"
)

func TestAppendEvent(t *testing.T) {
	out, off := AppendEvent(nil, wire.TypeStream, "orders.created", []byte("id-1"), []byte("body \x00"), true)
	if n := EventLen(wire.TypeStream, "orders.created", 4, 6, true); n != len(out) {
		t.Fatalf("EventLen %d, appended %d", n, len(out))
	}
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
	if got, err := wire.NewReader(bytes.NewReader(plain)).ReadMessage(); err != nil || off != -1 || got.Value(wire.HeaderTTL) != "" || got.Len() != 3 || len(plain) != EventLen(wire.TypeStream, "c", 1, 0, false) {
		t.Fatalf("without ttl: %v %d %q", err, off, got)
	}
	dst := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { dst, _ = AppendEvent(dst[:0], wire.TypeStream, "c", []byte("i"), nil, true) }); a != 0 {
		t.Fatalf("%.1f allocs", a)
	}
}

func TestAppendFieldsDecodesAsTheMessage(t *testing.T) {
	f := Fields{Type: wire.TypeResponse, Command: "orders.get", ID: "id-2", To: "shop.bus", ReplyTo: "id-1", RC: "10", Result: "HANDLER_FAILED", Error: "no such order", TTL: true}
	out, off := AppendFields([]byte("xx"), &f, []byte("body \x00"))
	if len(out)-2 != f.FrameLen(len("body \x00")) {
		t.Fatalf("FrameLen %d, appended %d", f.FrameLen(7), len(out)-2)
	}
	PatchTTL(out[off:], 250)
	got, err := wire.NewReader(bytes.NewReader(out[2:])).ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	want := wire.New(wire.TypeResponse, "orders.get").WithHeader(wire.HeaderID, "id-2").WithHeader(wire.HeaderTo, "shop.bus").
		WithHeader(wire.HeaderReplyTo, "id-1").WithHeader(wire.HeaderRC, "10").WithHeader(wire.HeaderResult, "HANDLER_FAILED").
		WithHeader(wire.HeaderError, "no such order").WithHeader(wire.HeaderTTL, "0000000250").WithBody([]byte("body \x00"))
	if !got.Equal(want) {
		t.Fatalf("%q", got)
	}
	// The View the receiving side parses agrees, sorted (the fast path).
	var v View
	if err := ParseView(out[2+prefixLen:], &v); err != nil || !v.sorted || v.Value(wire.HeaderReplyTo) != "id-1" {
		t.Fatalf("view: %v sorted=%v", err, v.sorted)
	}
	short := Fields{Type: wire.TypeRequest, Command: "c"}
	plain, off := AppendFields(nil, &short, nil)
	if got, err := wire.NewReader(bytes.NewReader(plain)).ReadMessage(); err != nil || off != -1 || got.Len() != 2 || len(plain) != short.FrameLen(0) {
		t.Fatalf("without ttl: %v %d %q", err, off, got)
	}
	dst := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { dst, _ = AppendFields(dst[:0], &f, nil) }); a != 0 {
		t.Fatalf("%.1f allocs", a)
	}
}
