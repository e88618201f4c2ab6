package bedrock

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLineMediumRPC joins two buses through a pair of pipes, one message
// per line, on real clocks: the way a Go node talks to a JavaScript
// runtime over stdin and stdout.
func TestLineMediumRPC(t *testing.T) {
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	ma, mb := NewLineMedium(r2, w1), NewLineMedium(r1, w2)
	clock := NewRealClock()
	defer clock.Close()
	a, _ := New(Options{SelfID: "go-node", Medium: ma, Clock: clock})
	b, _ := New(Options{SelfID: "addon", Medium: mb, Clock: clock})
	a.Start()
	b.Start()
	defer a.Stop()
	defer b.Stop()
	NewRPC(b).Handle("upper", func(p json.RawMessage, _ *Envelope) (any, error) {
		var s string
		_ = json.Unmarshal(p, &s)
		return strings.ToUpper(s), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := strings.Repeat("é😀", 2000) // several frames
	got, err := NewRPC(a).Call(ctx, "addon", "upper", long)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if json.Unmarshal(got, &s) != nil || s != strings.ToUpper(long) {
		t.Fatal("wrong answer")
	}
	if _, err := NewRPC(a).Call(ctx, "addon", "nosuch", nil); err == nil || !strings.Contains(err.Error(), "unknown method 'nosuch'") {
		t.Fatalf("unknown method: %v", err)
	}
	_ = w1.Close()
	_ = w2.Close()
	if err := ma.Wait(); err != nil {
		t.Fatal(err)
	}
	_ = mb.Wait()
}

// TestLineMediumLines: every line of the input reaches the listener in
// order, a line over MaxLineBytes and an empty one are skipped, and Send
// writes one line on ChannelID only.
func TestLineMediumLines(t *testing.T) {
	// The medium reads from the moment it is made: the input is written
	// only once the listener is registered, or it could miss every line.
	pr, pw := io.Pipe()
	var out strings.Builder
	m := NewLineMedium(pr, &out)
	var got []string
	stop := m.Listen(func(id, msg string) {
		if id != ChannelID {
			t.Errorf("id %q", id)
		}
		got = append(got, msg)
	})
	defer stop()
	go func() {
		_, _ = io.WriteString(pw, "first\r\n\n"+strings.Repeat("x", MaxLineBytes+1)+"\n"+strings.Repeat("y", MaxLineBytes)+"\nlast")
		pw.Close()
	}()
	waited := make(chan error, 1)
	go func() { waited <- m.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the medium never reached the end of its input")
	}
	if want := []string{"first", strings.Repeat("y", MaxLineBytes), "last"}; !slices.Equal(got, want) {
		t.Fatalf("got %d lines (%.20q...), want first, the line of MaxLineBytes, last", len(got), got)
	}
	if err := m.Send(ChannelID, "a\nb"); err == nil {
		t.Fatal("a message with a newline was sent")
	}
	if err := m.Send("other", "x"); err == nil {
		t.Fatal("another channel was sent")
	}
	if err := m.Send(ChannelID, `{"c":"x"}`); err != nil || out.String() != "{\"c\":\"x\"}\n" {
		t.Fatalf("wrote %q %v", out.String(), err)
	}
}
