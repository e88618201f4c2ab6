//go:build unix && !darwin

package transport

import "syscall"

// socketpair makes a connected pair of unix stream sockets. SOCK_CLOEXEC
// sets close-on-exec atomically, so a concurrent fork+exec elsewhere in
// the process cannot inherit the descriptors.
func socketpair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
