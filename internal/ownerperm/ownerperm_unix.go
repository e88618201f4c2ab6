//go:build !windows

package ownerperm

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// MkdirAll creates dir and any missing parents with mode 0700, as
// os.MkdirAll does; an existing dir is left as it is, for Exposed to
// judge.
func MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// Exposed returns "" when no other user may reach the file or directory
// fi describes (path names it in messages); else what exposes it, for an
// error message. mask is the permission bits that must be clear: 0o077
// for any access, 0o022 for writing. ownedByMe also asks that the
// current user own it.
func Exposed(path string, fi fs.FileInfo, mask fs.FileMode, ownedByMe bool) string {
	if perm := fi.Mode().Perm(); perm&mask != 0 {
		return fmt.Sprintf("mode %04o", perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ownedByMe && ok && int(st.Uid) != os.Getuid() {
		return fmt.Sprintf("owner uid %d, not %d", st.Uid, os.Getuid())
	}
	return ""
}

// Fix is the command that makes path private to its owner.
func Fix(path string, dir bool) string {
	if dir {
		return "chmod 700 " + path
	}
	return "chmod 600 " + path
}
