package moonbridge

import "testing"

// The codec on a 1 KiB event, both ways.
func benchFrame(b *testing.B) MessageFrame {
	proxy := ProxyEndpoint()
	return MessageFrame{OperationID: 1, TimeoutMillis: 5000, Message: Message{ID: NewUUID(), Kind: KindEvent, Channel: "mb:news",
		Source: BackendEndpoint("island-a"), Target: &proxy, Payload: make([]byte, 1024)}}
}

func BenchmarkEncodeMessage(b *testing.B) {
	f := benchFrame(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(f.Message.Payload)))
	for b.Loop() {
		if _, err := EncodeMessage(f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	frame, err := EncodeMessage(benchFrame(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := DecodeMessage(frame); err != nil {
			b.Fatal(err)
		}
	}
}
