package port

// The PortReply rule: which replies are success, warnings, application
// errors (and where their text comes from), and transport failures.

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPortReplyRule(t *testing.T) {
	cases := []struct {
		name, reply string
		rc          int
		warning     string
		body        string
		appErr      string // want an *Error with this text
		transport   bool   // want a *TransportError
	}{
		{"success", "---\nrc: 0\n---\n{\"a\":1}\n", 0, "", `{"a":1}`, "", false},
		{"no rc is success", "---\n---\n\"x\"\n", 0, "", `"x"`, "", false},
		{"warning kept", "---\nerror: careful\nrc: 5\n---\n[1]\n", 5, "careful", "[1]", "", false},
		{"rc 9: the last success", "---\nrc: 9\n---\n", 9, "", "", "", false},
		{"rc 10: error header", "---\nerror: no such note\nrc: 10\n---\n{\"error\":\"ignored\"}\n", 10, "", "", "no such note", false},
		{"error from the body's field", "---\nrc: 10\n---\n{\"error\":\"from body\"}\n", 10, "", "", "from body", false},
		{"error field not a string", "---\nrc: 10\n---\n{\"error\":{\"code\":3}}\n", 10, "", "", `{"code":3}`, false},
		{"error from the body", "---\nrc: 20\n---\nplain text\n", 20, "", "", "plain text", false},
		{"error with no text", "---\nrc: 12\n---\n", 12, "", "", "rc 12 with no error text", false},
		{"a JSON-shaped error text, kept raw", "---\nerror: {oops\nrc: 10\n---\n", 10, "", "", "{oops", false},
		{"rc not a number", "---\nrc: abc\n---\n", 0, "", "", "", true},
		{"rc past 255", "---\nrc: 256\n---\n", 0, "", "", "", true},
		{"not a frame", "garbage\n", 0, "", "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, _ := cosmixPort(t, c.reply)
			r, err := CallPort(ctxT(t, 10*time.Second), path, "x", nil)
			var pe *Error
			var te *TransportError
			switch {
			case c.transport:
				if !errors.As(err, &te) || errors.As(err, &pe) {
					t.Fatalf("%+v %v, want a TransportError only", r, err)
				}
			case c.appErr != "":
				if !errors.As(err, &pe) || errors.As(err, &te) || pe.Text != c.appErr || int(pe.RC) != c.rc || r == nil || int(r.RC) != c.rc {
					t.Fatalf("%+v %v, want *Error rc %d %q", r, err, c.rc, c.appErr)
				}
			default:
				if err != nil || int(r.RC) != c.rc || r.Error != c.warning || string(r.Body) != c.body {
					t.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
}

func TestTransportFailures(t *testing.T) {
	dir := shortDir(t)
	_, err := CallPort(ctxT(t, 5*time.Second), filepath.Join(dir, "none.sock"), "x", nil)
	var te *TransportError
	if !errors.As(err, &te) || te.Op != "dial" || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("no socket: %v", err)
	}

	// A port that reads the request and never answers: the caller's
	// deadline ends the call, as a timeout.
	path := filepath.Join(dir, "mute.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	defer func() {
		l.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = CallPort(ctx, path, "x", nil)
	if !errors.As(err, &te) || !te.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("mute port: %v, want a timeout", err)
	}

	// A command that cannot travel in a header is refused before dialling.
	if _, err := CallPort(ctxT(t, 5*time.Second), path, "a\nrc: 0", nil); err == nil || errors.As(err, &te) {
		t.Fatalf("newline in a command: %v", err)
	}
	if _, err := CallPort(ctxT(t, 5*time.Second), path, "x", func() {}); err == nil || !strings.Contains(err.Error(), "arguments") {
		t.Fatalf("arguments that are not JSON: %v", err)
	}
}

func TestCallPortTypedBodyMismatch(t *testing.T) {
	path, _ := cosmixPort(t, "---\nrc: 0\n---\n\"a string\"\n")
	_, r, err := CallPortTyped[map[string]int](ctxT(t, 5*time.Second), path, "x", nil)
	var te *TransportError
	if !errors.As(err, &te) || te.Op != "reply" || r == nil || string(r.Body) != `"a string"` {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestNamesAndDirectory(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"notes", true}, {"cosmix-edit", true}, {"a", true}, {"0.x_y-z", true},
		{strings.Repeat("a", MaxNameLen), true}, {strings.Repeat("a", MaxNameLen+1), false},
		{"", false}, {"Notes", false}, {"-x", false}, {".x", false}, {"a/b", false}, {"a b", false}, {"a:b", false},
	} {
		if err := ValidName(c.name); (err == nil) != c.ok || err != nil && !errors.Is(err, ErrBadName) {
			t.Errorf("ValidName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
	}

	base := shortDir(t)
	t.Setenv(EnvDir, filepath.Join(base, "ports"))
	p, err := Path("notes")
	if err != nil || p != filepath.Join(base, "ports", "notes.sock") {
		t.Fatalf("Path: %q %v", p, err)
	}
	l, err := Listen(p)
	if err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{filepath.Join(base, "ports"): 0o700, p: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v, want mode %04o", path, err, mode)
		}
	}
	if r, err := Resolve("notes"); err != nil || r != p {
		t.Fatalf("Resolve: %q %v", r, err)
	}
	if r, _ := Resolve("./x.sock"); r != "./x.sock" {
		t.Fatalf("a path resolves to itself: %q", r)
	}
	if _, err := Listen(p); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("a live port's path: %v, want ErrPortInUse", err)
	}
	// A socket left behind by a port that is gone is replaced.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := Listen(p)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	l2.Close()

	if runtime.GOOS != "windows" { // no file modes there: the rule is the ACL
		if err := os.Chmod(filepath.Join(base, "ports"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Listen(p); !errors.Is(err, ErrUnsafeDir) {
			t.Fatalf("a directory others can read: %v, want ErrUnsafeDir", err)
		}
	}
	if _, err := Listen("/" + strings.Repeat("x", maxSocketPath)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a path past the socket limit: %v", err)
	}
	if _, err := New(Config{Name: "x", Commands: map[string]Command{"help": {Run: notes().Commands["fail"].Run}}}); err == nil {
		t.Fatal("New accepted a command named like a standard one")
	}
}
