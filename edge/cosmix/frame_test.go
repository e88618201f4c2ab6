package cosmix

import (
	"errors"
	"strings"
	"testing"

	"busbar/wire"
)

// The frames below are the bytes cosmix-lib-client's NodedClient writes
// (BusMessage::to_wire: headers in key order, the body, a newline).
const (
	registerFrame = "---\ncommand: noded.register\nfrom: service-a\nid: 1\nto: noded\ntype: request\n---\n"
	callFrame     = "---\ncommand: greet\nfrom: service-a\nid: 2\nto: service-b\ntype: request\n---\n{\"msg\":\"hello from A\"}\n"
)

func TestDecodeReadsTheClientsRegisterAndCallFrames(t *testing.T) {
	m, err := Decode([]byte(registerFrame))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"command": "noded.register", "from": "service-a", "id": "1", "to": "noded", "type": "request"} {
		if got := m.Value(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	m, err = Decode([]byte(callFrame))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Body()) != `{"msg":"hello from A"}` {
		t.Errorf("body %q", m.Body())
	}
}

func TestEncodeWritesWhatTheClientWrites(t *testing.T) {
	m := wire.Empty().WithHeader("type", "request").WithHeader("id", "2").WithHeader("to", "service-b").
		WithHeader("from", "service-a").WithHeader("command", "greet").WithBody([]byte(`{"msg":"hello from A"}`))
	if got := string(Encode(m)); got != callFrame {
		t.Fatalf("got %q\nwant %q", got, callFrame)
	}
	if got := string(Encode(wire.Empty())); got != "---\n---\n" {
		t.Fatalf("heartbeat encodes as %q", got)
	}
}

func TestDecodeTakesTheHeartbeatFrame(t *testing.T) {
	m, err := Decode([]byte("---\n---\n"))
	if err != nil || !m.IsHeartbeat() {
		t.Fatalf("heartbeat: %v, %v", m, err)
	}
}

func TestDecodeRefusesWhatIsNotAFrameWithNodedsText(t *testing.T) {
	for _, in := range []string{"", "hello", "command: x\n", "---command: x\n", "--\n---\n"} {
		_, err := Decode([]byte(in))
		var fe *FrameError
		if !errors.As(err, &fe) || !errors.Is(err, ErrFrame) {
			t.Fatalf("%q: got %v, want a *FrameError", in, err)
		}
		if !strings.HasPrefix(err.Error(), "Invalid Bus message: ") {
			t.Errorf("%q: text %q", in, err)
		}
	}
}

func TestDecodeTakesMaxMessageBytesAndRefusesOneMore(t *testing.T) {
	head := "---\ncommand: x\n---\n"
	at := head + strings.Repeat("a", MaxMessageBytes-len(head))
	if _, err := Decode([]byte(at)); err != nil {
		t.Fatalf("a frame of exactly MaxMessageBytes: %v", err)
	}
	_, err := Decode([]byte(at + "a"))
	if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("one byte more: %v", err)
	}
}

func TestDecodeKeepsMaxHeadersAndDropsTheLinesPastThem(t *testing.T) {
	var b strings.Builder
	b.WriteString("---\n")
	for i := range MaxHeaders + 1 {
		b.WriteString("h")
		b.WriteString(strings.Repeat("x", 0))
		b.WriteString(itoa(i))
		b.WriteString(": v\n")
	}
	b.WriteString("---\n")
	m, err := Decode([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != MaxHeaders {
		t.Fatalf("kept %d headers, want %d", m.Len(), MaxHeaders)
	}
	if _, ok := m.Get("h" + itoa(MaxHeaders)); ok {
		t.Fatal("the header past MaxHeaders was kept")
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// cosmix-lib-bus's parse_lenient: its one refusal's text, the first
// ParseErrorPrefixBytes of the message as Rust's Debug writes them.
func TestDecodeQuotesTheMessageAsCosmixDoes(t *testing.T) {
	at := strings.Repeat("x", ParseErrorPrefixBytes)
	for _, c := range []struct{ in, quoted string }{
		{"", `""`},
		{"hello", `"hello"`},
		{"say \"hi\"\t\\ it's\r\n\x00", `"say \"hi\"\t\\ it's\r\n\0"`},
		{"caf\u00e9 \u00a0\u200b\u0301", `"café \u{a0}\u{200b}\u{301}"`},
		{at, `"` + at + `"`},
		{at + "y", `"` + at + `"`},
		{at[1:] + "é", `"` + at[1:] + `"`}, // byte 40 is inside the é
	} {
		_, err := Decode([]byte(c.in))
		if want := "Invalid Bus message: Bus message must start with '---\\n', got: " + c.quoted; err == nil || err.Error() != want {
			t.Errorf("%q: got %v\nwant %s", c.in, err, want)
		}
	}
}

// A frame without its closing "---" line is all header block, as cosmix
// parses it.
func TestDecodeTakesAFrameWithoutItsClosingLineAsCosmixDoes(t *testing.T) {
	for _, in := range []string{"---\ncommand: x\nid: 1", "---\ncommand: x\nid: 1\n", "---\ncommand: x\nid: 1---", "---\ncommand: x\nid: 1---\n"} {
		m, err := Decode([]byte(in))
		if err != nil || m.Value("command") != "x" || m.Value("id") != "1" || len(m.Body()) != 0 {
			t.Errorf("%q: %v, %v", in, m, err)
		}
	}
	if m, err := Decode([]byte("---\n")); err != nil || !m.IsHeartbeat() {
		t.Errorf("\"---\\n\": %v, %v", m, err)
	}
}
