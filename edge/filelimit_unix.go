//go:build unix

package edge

import "syscall"

// FileLimit raises the process's soft limit on open file descriptors to
// its hard limit (Go's runtime does so at start on most systems; this
// makes sure) and returns the soft limit in force. ok is false where the
// system has no such limit or it cannot be read.
func FileLimit() (limit uint64, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			rl = raised
		}
	}
	return uint64(rl.Cur), true
}
