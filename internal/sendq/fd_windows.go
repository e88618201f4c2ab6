package sendq

import (
	"net"
	"syscall"
)

// rawConn is nil here: on Windows RawConn.Write runs its callback once and
// cannot wait for the socket to drain, so a queue on this system never
// flushes in place and its writer writes each slice through net.Conn.
// writeFD and writev below are what a descriptor's writes would be, never
// called.
func rawConn(net.Conn) syscall.RawConn { return nil }

// writeFD is one write system call.
func writeFD(fd uintptr, p []byte) (int, error) { return syscall.Write(syscall.Handle(fd), p) }

// sysScratch is empty: writev writes the first slice only, which a
// vectored write may do.
type sysScratch struct{}

func (*sysScratch) writev(fd int, bufs [][]byte) (int, error) {
	return writeFD(uintptr(fd), bufs[0])
}
