//go:build unix

package broker

import (
	"net"
	"syscall"
)

// peekConn copies into buf what waits unread on nc's socket, without
// taking it (MSG_PEEK) or waiting (MSG_DONTWAIT); 0 when nothing waits or
// nc is not a socket of its own (TLS, a pipe).
func peekConn(nc net.Conn, buf []byte) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		got, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == nil && got > 0 {
			n = got
		}
	})
	return n
}
