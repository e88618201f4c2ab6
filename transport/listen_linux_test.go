package transport

// Linux's own rules for unix sockets: the mode given before bind, and the
// send buffer granted.

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestBindUnixNoWindow checks the Linux pre-bind chmod: even with umask 0
// the file is created 0600, before Listen's chmod runs. Not parallel, as
// umask is process-wide.
func TestBindUnixNoWindow(t *testing.T) {
	path := sockPath(t)
	old := syscall.Umask(0)
	ln, err := bindUnix(path)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket created with mode %v, want 0600", fi.Mode().Perm())
	}
}

// Both ends of a unix socket connection ask for UnixSendBuffer: the
// accepted one (which does not inherit the listener's) and the dialled
// one. Linux reports twice what was granted, and grants at most
// net.core.wmem_max.
func TestUnixConnectionsGetTheLargerSendBuffer(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	if err != nil {
		t.Skip(err)
	}
	wmemMax, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := 2 * min(UnixSendBuffer, wmemMax)
	path := sockPath(t)
	ln := mustListen(t, "unix://"+path, nil)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	e, _ := ParseEndpoint("unix://" + path)
	dialled, err := Dial(context.Background(), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dialled.Close()
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	defer server.Close()
	for name, c := range map[string]net.Conn{"accepted": server, "dialled": dialled} {
		if _, ok := c.(*net.UnixConn); !ok {
			t.Fatalf("%s connection is a %T, want *net.UnixConn", name, c)
		}
		if got := sendBuffer(t, c); got != want {
			t.Errorf("%s connection's SO_SNDBUF = %d, want %d", name, got, want)
		}
	}
}

func sendBuffer(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var serr error
	if err := rc.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return n
}
