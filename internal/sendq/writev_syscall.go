//go:build linux || freebsd || netbsd || dragonfly

package sendq

import (
	"os"
	"syscall"
	"unsafe"
)

// sysScratch holds the iovecs of a writev, reused so a vectored write
// allocates nothing.
type sysScratch struct{ iov []syscall.Iovec }

// writev is one writev system call, made directly (these systems keep
// their system call numbers stable) rather than through x/sys's
// unix.Writev, which allocates its iovecs on the heap past eight slices:
// a batch here often has more, and the hot path allocates nothing. The
// error is a bare syscall.Errno for EINTR and EAGAIN, which writevNow
// tests for.
func (x *sysScratch) writev(fd int, bufs [][]byte) (int, error) {
	x.iov = x.iov[:0]
	for _, b := range bufs {
		v := syscall.Iovec{Base: &b[0]} // writev passes no empty slice
		v.SetLen(len(b))
		x.iov = append(x.iov, v)
	}
	m, _, e := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&x.iov[0])), uintptr(len(x.iov)))
	clear(x.iov) // drop the references to the caller's bytes
	switch e {
	case 0:
		return int(m), nil
	case syscall.EINTR, syscall.EAGAIN:
		return 0, e
	}
	return 0, os.NewSyscallError("writev", e)
}
