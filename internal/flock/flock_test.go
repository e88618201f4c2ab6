package flock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A second open file cannot take the lock while the first holds it, and
// takes it once the first is closed.
func TestTryLockIsExclusiveUntilTheHolderCloses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first, second := open(), open()
	defer second.Close()
	if err := TryLock(first); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := TryLock(second); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock while the first holds it: %v, want ErrLocked", err)
	}
	first.Close()
	if err := TryLock(second); err != nil {
		t.Fatalf("second lock after the first closed: %v", err)
	}
}
