package ownerperm

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A directory MkdirAll creates is private, and so is a file created in
// it with mode 0600; a file others may read is exposed, with the mode
// (or ACL entry) named and a fix that names the path.
func TestMkdirAllIsPrivateAndLooseFilesAreExposed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if why := Exposed(dir, fi, 0o077, true); why != "" {
		t.Fatalf("new directory exposed: %s", why)
	}
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if why := Exposed(path, fi, 0o077, false); why != "" {
		t.Fatalf("0600 file in a private directory exposed: %s", why)
	}
	if !strings.Contains(Fix(path, false), path) {
		t.Fatalf("fix %q does not name %s", Fix(path, false), path)
	}
	if runtime.GOOS == "windows" {
		return // no modes to loosen: the ACL decides
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if why := Exposed(path, fi, 0o077, false); why != "mode 0640" {
		t.Fatalf("0640 file: %q, want mode 0640", why)
	}
	if why := Exposed(path, fi, 0o022, false); why != "" {
		t.Fatalf("0640 file where only writing counts: %q", why)
	}
}
