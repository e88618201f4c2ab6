package wire

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestProtocolDocExample keeps the byte-level example in docs/protocol.md
// true: it must be exactly what AppendFrame produces.
func TestProtocolDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- stream-example:")
	if !ok {
		t.Fatal("docs/protocol.md has no stream example")
	}
	_, rest, _ = strings.Cut(rest, "```\n")
	block, _, _ := strings.Cut(rest, "```")
	frame, err := AppendFrame(nil, New(TypeEvent, "chat").WithHeader("id", "7").WithBody([]byte("hi\x00\n")))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.Dump(frame); got != block {
		t.Fatalf("docs/protocol.md example is stale; the encoder produces:\n%s", got)
	}
}
