package port

// Helpers shared by the port tests: a real port on a real Unix socket, and
// a raw caller that speaks the bytes the way a cosmix script does.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"busbar/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// shortDir is a fresh directory with a short path (a socket path is
// limited to 107 bytes; t.TempDir's can be longer).
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "port")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// notes is the port most tests serve: one command that greets, one that
// fails, one that warns.
func notes() Config {
	return Config{
		Name: "notes", App: "notes", Version: "1.0",
		Commands: map[string]Command{
			"greet": {Description: "Greet someone", Run: func(_ context.Context, args json.RawMessage) (any, error) {
				var a struct {
					Name string `json:"name"`
				}
				if err := json.Unmarshal(args, &a); err != nil {
					return nil, err
				}
				return map[string]string{"greeting": "hello " + a.Name}, nil
			}},
			"fail": {Description: "Always fails", Run: func(context.Context, json.RawMessage) (any, error) {
				return nil, errors.New("boom")
			}},
			"careful": {Description: "Succeeds with a warning", Run: func(context.Context, json.RawMessage) (any, error) {
				return []int{1, 2}, &Error{RC: 5, Text: "two only"}
			}},
		},
	}
}

// serve starts cfg's port on a socket in a fresh directory and returns
// its path; the test's cleanup closes it and checks Serve's return.
func serve(t testing.TB, cfg Config) (string, *Server) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shortDir(t), cfg.Name+".sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return path, s
}

// rawCall is a cosmix-style caller: it writes req, shuts down its write
// side and reads the reply to its end.
func rawCall(t testing.TB, path, req string) string {
	t.Helper()
	c := dialRaw(t, path)
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	return readReply(t, c)
}

func dialRaw(t testing.TB, path string) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c.(*net.UnixConn)
}

func readReply(t testing.TB, c net.Conn) string {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the reply: %v (got %q)", err, b)
	}
	return string(b)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
