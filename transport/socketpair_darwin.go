package transport

import "syscall"

// socketpair makes a connected pair of unix stream sockets. macOS has no
// SOCK_CLOEXEC: the descriptors are marked close-on-exec under
// syscall.ForkLock, which os/exec takes to fork, so no child started
// meanwhile inherits them (what the standard library does there).
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
