package flock

import (
	"errors"
	"math"
	"os"

	"golang.org/x/sys/windows"
)

// TryLock takes an exclusive lock on the whole of f without waiting
// (LockFileEx): ErrLocked when another handle holds it. Unlike flock, the
// lock is mandatory: other handles cannot read or write the locked bytes,
// which is why busbar locks a file of its own that nothing reads.
func TryLock(f *os.File) error {
	var ol windows.Overlapped
	err := windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, math.MaxUint32, math.MaxUint32, &ol)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION):
		return ErrLocked
	}
	return os.NewSyscallError("LockFileEx", err)
}
