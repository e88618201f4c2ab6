package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"busbar/internal/flock"
)

// lockFileName is the file in a data directory that the broker using it
// holds an exclusive lock on (package flock), released when the process ends,
// however it ends.
const lockFileName = "busbar.lock"

// lockDataDir takes the data directory's lock without waiting. A second
// `busbar serve` on the same directory is refused at once, naming it,
// before it touches the socket, the state store or the relay.
func lockDataDir(dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.TryLock(f); err != nil {
		_ = f.Close()
		if errors.Is(err, flock.ErrLocked) {
			return nil, fmt.Errorf("another broker is using %s (stop it, or give this one its own --data DIR)", dir)
		}
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { _ = f.Close() }, nil
}
