package auth

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"busbar/internal/ownerperm"
)

// maxFileSize bounds what readSecureFile will read; principal files are
// small, and a runaway file should fail rather than eat memory.
const maxFileSize = 16 << 20

// readSecureFile reads a regular file that must not be readable or writable
// by group or others: it holds secrets or secret hashes, and a file others
// can write would let them add a principal. On Unix the mode is checked on
// the open descriptor so the file cannot be swapped between check and
// read; on Windows the rule is the file's ACL (package ownerperm).
func readSecureFile(path string) ([]byte, error) { return ReadSecretFile(path, maxFileSize) }

// ReadSecretFile reads a regular file of at most limit bytes that only
// its owner may read or write, as the principals and credentials files
// are: another user's access is refused (ErrInsecureFile, with the way to
// fix it), a larger file too.
func ReadSecretFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("auth: %s: not a regular file", path)
	}
	if why := ownerperm.Exposed(path, fi, 0o077, false); why != "" {
		return nil, fmt.Errorf("%w: %s has %s; other users could read it (%s)", ErrInsecureFile, path, why, ownerperm.Fix(path, false))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("auth: %s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// writeFileAtomic writes data to path with mode 0600 via a temp file in the
// same directory, fsync and rename, so readers see either the old file or
// the complete new one, and the content never exists with a wider mode
// (os.CreateTemp creates files 0600).
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename durable. Best effort: some platforms and file
// systems cannot fsync a directory, and the data itself is already synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
