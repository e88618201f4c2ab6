//go:build !linux

package relay

import "os"

// syncData makes f's written bytes durable (File.Sync: fsync, or
// F_FULLFSYNC on Apple platforms).
func syncData(f *os.File) error { return f.Sync() }
