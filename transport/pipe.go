//go:build unix

package transport

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// Pipe returns the two ends of an in-process connection. Unlike net.Pipe,
// which is synchronous and unbuffered (every Write waits for a Read), the
// ends are a kernel socketpair: both are *net.UnixConn with kernel buffering
// and working deadlines, so an embedded client behaves like a remote one.
// (Windows has no socketpair: pipe_windows.go.)
func Pipe() (client, server net.Conn, err error) {
	fds, err := socketpair()
	if err != nil {
		return nil, nil, fmt.Errorf("transport: pipe: %w", os.NewSyscallError("socketpair", err))
	}
	client, err = fileConn(fds[0], "busbar-pipe-client")
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	server, err = fileConn(fds[1], "busbar-pipe-server")
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, server, nil
}

// fileConn wraps fd in a net.Conn. net.FileConn dups the descriptor, so the
// original is closed here in every case.
func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("transport: pipe: %w", err)
	}
	return c, nil
}
