package relay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"busbar/internal/flock"
)

// lockDir takes an exclusive lock on dir/LOCK for as long as the returned
// file is open, so two stores (in one process or two) never share a
// directory: flock on Unix, LockFileEx on Windows (package flock).
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.TryLock(f); err != nil {
		f.Close()
		if errors.Is(err, flock.ErrLocked) {
			return nil, fmt.Errorf("relay: store %s is in use by another store (another relay on the same directory?)", dir)
		}
		return nil, fmt.Errorf("relay: locking %s: %w", path, err)
	}
	return f, nil
}
