// Package flock takes the exclusive file locks that keep two brokers or
// two relay stores off one directory. A lock is held for as long as the
// file stays open, and the system drops it when the process ends, however
// it ends.
package flock

import "errors"

// ErrLocked is returned by TryLock when another open file (in this
// process or another) holds the lock.
var ErrLocked = errors.New("flock: locked by another holder")
