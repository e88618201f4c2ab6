package port

// Byte compatibility with cosmix's ports, both ways, in the exact bytes
// its Port server and call_port exchange: a cosmix-style caller (raw
// socket bytes) calling a busbar port, and busbar's CallPort calling a
// cosmix-style port (a raw listener).

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCosmixCallerGetsCosmixBytes(t *testing.T) {
	path, _ := serve(t, notes())
	cases := []struct{ name, req, reply string }{
		{"command with arguments",
			"---\ncommand: greet\n---\n{\"name\":\"ann\"}\n",
			"---\nrc: 0\n---\n{\"greeting\":\"hello ann\"}\n"},
		{"application error: no body",
			"---\ncommand: fail\n---\n",
			"---\nerror: boom\nrc: 10\n---\n"},
		{"unknown command: cosmix's text",
			"---\ncommand: nope\n---\n",
			"---\nerror: Unknown command 'nope'. Available: careful, fail, greet, help, info\nrc: 10\n---\n"},
		{"warning keeps its body",
			"---\ncommand: careful\n---\n",
			"---\nerror: two only\nrc: 5\n---\n[1,2]\n"},
		{"info: cosmix's fields, in serde_json's key order",
			"---\ncommand: info\n---\n",
			"---\nrc: 0\n---\n{\"app\":\"notes\",\"command_list\":[\"careful\",\"fail\",\"greet\",\"help\",\"info\"],\"commands\":5,\"port\":\"notes\",\"version\":\"1.0\"}\n"},
		{"help for one command",
			"---\ncommand: help\n---\n{\"command\":\"greet\"}\n",
			"---\nrc: 0\n---\n{\"command\":\"greet\",\"description\":\"Greet someone\"}\n"},
		{"help, a bare string argument",
			"---\ncommand: help\n---\n\"fail\"\n",
			"---\nrc: 0\n---\n{\"command\":\"fail\",\"description\":\"Always fails\"}\n"},
		{"help for an unknown command",
			"---\ncommand: help\n---\n{\"command\":\"nope\"}\n",
			"---\nerror: Unknown command: nope\nrc: 10\n---\n"},
		{"cosmix's parse trims the command; so does busbar",
			"---\ncommand: greet \n---\n{\"name\":\"<b>&\"}",
			"---\nrc: 0\n---\n{\"greeting\":\"hello <b>&\"}\n"}, // no \u003c: serde does not escape HTML
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := rawCall(t, path, c.req); got != c.reply {
				t.Fatalf("reply\n got %q\nwant %q", got, c.reply)
			}
		})
	}
	// help with no argument: cosmix's sorted "commands" list, and each
	// command's description beside it.
	want := "---\nrc: 0\n---\n{\"commands\":[\"careful\",\"fail\",\"greet\",\"help\",\"info\"],\"descriptions\":{\"careful\":\"Succeeds with a warning\",\"fail\":\"Always fails\",\"greet\":\"Greet someone\",\"help\":\"List commands or describe a specific command\",\"info\":\"Return port and application metadata\"}}\n"
	if got := rawCall(t, path, "---\ncommand: help\n---\n"); got != want {
		t.Fatalf("help\n got %q\nwant %q", got, want)
	}
}

// cosmixPort is a cosmix-style port: it reads one request to EOF, hands
// it to the test, writes reply and closes.
func cosmixPort(t *testing.T, reply string) (path string, requests <-chan string) {
	t.Helper()
	path = filepath.Join(shortDir(t), "cosmix.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		got <- string(b)
		_, _ = io.WriteString(c, reply)
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return path, got
}

func TestCallPortSpeaksCosmixBytes(t *testing.T) {
	type greeting struct {
		Greeting string `json:"greeting"`
	}
	t.Run("request bytes and a success", func(t *testing.T) {
		path, req := cosmixPort(t, "---\nrc: 0\n---\n{\"greeting\":\"hello ann\"}\n")
		g, r, err := CallPortTyped[greeting](ctxT(t, 10*time.Second), path, "greet", map[string]string{"name": "ann"})
		if err != nil || g.Greeting != "hello ann" || r.RC != 0 {
			t.Fatalf("%+v %+v %v", g, r, err)
		}
		if got := <-req; got != "---\ncommand: greet\n---\n{\"name\":\"ann\"}\n" {
			t.Fatalf("request bytes %q", got)
		}
	})
	t.Run("no arguments, no body", func(t *testing.T) {
		path, req := cosmixPort(t, "---\nrc: 0\n---\n\"activated\"\n")
		r, err := CallPort(ctxT(t, 10*time.Second), path, "activate", nil)
		if err != nil || string(r.Body) != `"activated"` {
			t.Fatalf("%+v %v", r, err)
		}
		if got := <-req; got != "---\ncommand: activate\n---\n" {
			t.Fatalf("request bytes %q", got)
		}
	})
	t.Run("cosmix's error reply", func(t *testing.T) {
		path, _ := cosmixPort(t, "---\nerror: Unknown command 'x'. Available: help, info\nrc: 10\n---\n")
		r, err := CallPort(ctxT(t, 10*time.Second), path, "x", nil)
		var pe *Error
		if !errors.As(err, &pe) || pe.RC != 10 || pe.Text != "Unknown command 'x'. Available: help, info" || r == nil {
			t.Fatalf("%+v %v", r, err)
		}
	})
	t.Run("a port that closes without a reply", func(t *testing.T) {
		path, _ := cosmixPort(t, "") // cosmix does this with a request it cannot parse
		_, err := CallPort(ctxT(t, 10*time.Second), path, "x", nil)
		var te *TransportError
		if !errors.As(err, &te) || !errors.Is(err, ErrNoReply) {
			t.Fatalf("%v, want a TransportError with ErrNoReply", err)
		}
	})
}

func TestActivateWhereThereIsAWindow(t *testing.T) {
	cfg := notes()
	cfg.Name = "editor"
	raised := make(chan struct{}, 1)
	cfg.Activate = func(context.Context) error { raised <- struct{}{}; return nil }
	path, _ := serve(t, cfg)
	if got := rawCall(t, path, "---\ncommand: activate\n---\n"); got != "---\nrc: 0\n---\n\"activated\"\n" {
		t.Fatalf("activate: %q", got)
	}
	<-raised
	want := "---\nrc: 0\n---\n{\"command\":\"activate\",\"description\":\"Bring application window to front\"}\n"
	if got := rawCall(t, path, "---\ncommand: help\n---\n\"activate\"\n"); got != want {
		t.Fatalf("help activate: %q", got)
	}
	// Without a window there is no activate: notes' table lists none.
	plain, _ := serve(t, notes())
	if got := rawCall(t, plain, "---\ncommand: activate\n---\n"); !strings.Contains(got, "Unknown command 'activate'") {
		t.Fatalf("activate without a window: %q", got)
	}
}
