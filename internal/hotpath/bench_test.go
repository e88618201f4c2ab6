package hotpath

import (
	"bytes"
	"testing"

	"busbar/wire"
)

// streamFrame128 is what a client's Emit sends: command, id, ttl slot, type.
func streamFrame128() []byte {
	out, off := AppendEvent(nil, wire.TypeStream, "bench.pubsub", []byte("0190f3a25b7c7d1e"), bytes.Repeat([]byte("x"), 128), true)
	PatchTTL(out[off:], 30000)
	return out[prefixLen:]
}

func BenchmarkParseView128(b *testing.B) {
	frame := streamFrame128()
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var v View
	for b.Loop() {
		if err := ParseView(frame, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendForward128(b *testing.B) {
	frame := streamFrame128()
	var v View
	if err := ParseView(frame, &v); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		buf, _ = AppendForward(buf[:0], &v, "publisher.bus", true)
	}
}

func BenchmarkAppendEvent128(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 128)
	id := []byte("0190f3a25b7c7d1e")
	b.ReportAllocs()
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		buf, _ = AppendEvent(buf[:0], wire.TypeStream, "bench.pubsub", id, body, true)
	}
}

// BenchmarkParseViewUnsorted128 is the path of a frame no busbar writer
// sends (keys out of order): wire.Decode gives the verdict.
func BenchmarkParseViewUnsorted128(b *testing.B) {
	frame := textFrame(string(bytes.Repeat([]byte("x"), 128)), "type: stream", "ttl: 0000030000", "id: 0190f3a25b7c7d1e", "command: bench.pubsub")
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var v View
	for b.Loop() {
		if err := ParseView(frame, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPatchTTL stamps a remaining budget, as every writer does for
// every message with a deadline.
func BenchmarkPatchTTL(b *testing.B) {
	out := make([]byte, TTLWidth)
	ms := int64(29_000)
	for b.Loop() {
		PatchTTL(out, ms)
		ms ^= 1 // not a constant the compiler can fold
	}
}
