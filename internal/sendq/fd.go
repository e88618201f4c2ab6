//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sendq

import (
	"net"
	"syscall"
)

// Writing to the descriptor itself: on the systems named in the build
// line, RawConn.Write runs its callback with a non-blocking socket and
// waits for the socket to drain when the callback asks, which is what a
// flush in place needs. Windows (fd_windows.go) writes through net.Conn
// only.

// rawConn is nc's descriptor access, or nil when it has none (TLS,
// WebSocket).
func rawConn(nc net.Conn) syscall.RawConn {
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return raw
		}
	}
	return nil
}

// writeFD is one write system call.
func writeFD(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }
