//go:build unix

package statestore

// The store's last line of defence: what bbolt does while opening and
// loading runs in guarded, where a panic, and a memory fault reading a
// mapped file, are errors.

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
)

func TestGuardedTurnsAFaultInAMappedFileIntoAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "short")
	page := os.Getpagesize()
	if err := os.WriteFile(path, make([]byte, page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Two pages mapped over a one-page file, as bbolt maps past a
	// truncated file's end: reading the second page is SIGBUS.
	mem, err := syscall.Mmap(int(f.Fd()), 0, 2*page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	var sink byte
	err = guarded(func() error { sink = mem[page]; return nil })
	var pe *panicError
	if !errors.As(err, &pe) {
		t.Fatalf("reading past the end of a mapped file: %v (read %d)", err, sink)
	}
	t.Logf("the fault, as an error: %v", err)
	if debug.SetPanicOnFault(false) {
		t.Fatal("guarded left SetPanicOnFault on")
	}
}

func TestGuardedTurnsAPanicIntoAnError(t *testing.T) {
	err := guarded(func() error { panic("assertion failed: page 7 says it is page 9") })
	var pe *panicError
	if !errors.As(err, &pe) {
		t.Fatalf("a panic: %v", err)
	}
}
