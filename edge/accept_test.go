package edge

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first n Accepts with err, then hands out
// the connections it is given.
type failingListener struct {
	net.Listener
	n     int
	err   error
	conns chan net.Conn
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, l.err
	}
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

func (l *failingListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (l *failingListener) Close() error   { return nil }

// A door whose accept fails with EMFILE keeps accepting once the
// failures pass: the failure is counted, never returned.
func TestAcceptRetriesTooManyOpenFiles(t *testing.T) {
	for _, err := range []error{
		&net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)},
		&net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ENFILE)},
		&net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ECONNABORTED)},
	} {
		fl := &failingListener{n: 3, err: err, conns: make(chan net.Conn, 1)}
		a, b := net.Pipe()
		fl.conns <- a
		close(fl.conns)
		before := AcceptFailures()["test-emfile"]
		var got []net.Conn
		ret := Accept(fl, "test-emfile", nil, func(c net.Conn) { got = append(got, c) })
		if !errors.Is(ret, net.ErrClosed) || len(got) != 1 {
			t.Fatalf("%v: Accept returned %v with %d connections; want net.ErrClosed after 1", err, ret, len(got))
		}
		if n := AcceptFailures()["test-emfile"] - before; n != 3 {
			t.Fatalf("%v: %d failures counted, want 3", err, n)
		}
		a.Close()
		b.Close()
	}
}

// An error that is not temporary stops the door and is returned.
func TestAcceptReturnsAPermanentError(t *testing.T) {
	bad := errors.New("listener broken")
	fl := &failingListener{n: 1, err: bad, conns: make(chan net.Conn)}
	if err := Accept(fl, "test-permanent", nil, func(net.Conn) { t.Fatal("served a connection") }); !errors.Is(err, bad) {
		t.Fatalf("Accept returned %v, want %v", err, bad)
	}
}

// Closing the listener ends a pause at once.
func TestListenerCloseEndsAPause(t *testing.T) {
	fl := &failingListener{n: 1 << 30, err: os.NewSyscallError("accept4", syscall.EMFILE), conns: make(chan net.Conn)}
	l := Listener(fl, "test-close", nil)
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	// Wait until the loop is in its longest pauses, then close.
	for AcceptFailures()["test-close"] < 5 {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

func TestTemporary(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{net.ErrClosed, false},
		{&net.OpError{Op: "accept", Err: net.ErrClosed}, false},
		{os.NewSyscallError("accept4", syscall.EMFILE), true},
		{os.NewSyscallError("accept4", syscall.ENOBUFS), true},
		{errors.New("something else"), false},
	} {
		if got := Temporary(c.err); got != c.want {
			t.Errorf("Temporary(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// churnListener alternates: a failure as a process at its descriptor
// limit sees, then a connection, as a flood that keeps it at its limit.
type churnListener struct {
	failingListener
	i int
}

func (l *churnListener) Accept() (net.Conn, error) {
	l.i++
	if l.i > 2*l.n {
		return nil, net.ErrClosed
	}
	if l.i%2 == 1 {
		return nil, os.NewSyscallError("accept4", syscall.EMFILE)
	}
	a, b := net.Pipe()
	b.Close()
	return a, nil
}

// Under a flood that keeps the process at its limit, accepts alternate
// with failures: the log has at most one "accept failed" line a second
// per listener, each saying how many failures it covers.
func TestAcceptLogsAtMostOneFailureASecondUnderChurn(t *testing.T) {
	const rounds = 50
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	start := time.Now()
	err := Accept(&churnListener{failingListener: failingListener{n: rounds}}, "test-churn", log, func(c net.Conn) { c.Close() })
	if !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
	lines := strings.Count(buf.String(), "accept failed")
	if most := 1 + int(time.Since(start)/AcceptLogInterval); lines > most || lines < 1 {
		t.Fatalf("%d lines for %d failures in %v, want 1 to %d:\n%s", lines, rounds, time.Since(start), most, buf.String())
	}
}
