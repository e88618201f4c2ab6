package relay

import (
	"os"
	"syscall"
)

// syncData makes f's written bytes durable. fdatasync is enough for an
// appended log: it also flushes the file size, which reading the data
// needs, and skips the timestamps.
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
