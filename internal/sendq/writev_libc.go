//go:build darwin || openbsd

package sendq

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysScratch is empty: unix.Writev builds its iovecs on the stack for up
// to eight slices.
type sysScratch struct{}

// writev is one writev through the C library, the only supported way to
// make system calls on these systems. The error is a bare syscall.Errno
// for EINTR and EAGAIN, which writevNow tests for.
func (*sysScratch) writev(fd int, bufs [][]byte) (int, error) {
	n, err := unix.Writev(fd, bufs)
	var e syscall.Errno
	switch {
	case err == nil:
		return n, nil
	case errors.As(err, &e) && (e == syscall.EINTR || e == syscall.EAGAIN):
		return 0, e
	}
	return 0, os.NewSyscallError("writev", err)
}
