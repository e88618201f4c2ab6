package auth

// Bootstrapping a principals store and loading a node's credential from
// files: the files written, their permissions, and refusals.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestBootstrap(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "busbar")
	r, err := Bootstrap(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created {
		t.Fatalf("first run: %+v", r)
	}
	if r.PrincipalsPath != filepath.Join(dir, PrincipalsFile) || r.CredentialsPath != filepath.Join(dir, CredentialsFile) {
		t.Fatalf("paths: %+v", r)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %04o", m)
	}
	for _, p := range []string{r.PrincipalsPath, r.CredentialsPath} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s mode %04o", p, m)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("dir has %d entries, want 2 (temp files left?)", len(ents))
	}

	st, err := Load(r.PrincipalsPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCredential(r.CredentialsPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Authenticate(c, "anything-valid", nil)
	if err != nil {
		t.Fatalf("bootstrap credentials: %v (%s)", err, Reason(err))
	}
	if p.Name != "local" || !p.Permissions.Allows(ActionHandle, "x.y") {
		t.Errorf("principal %+v", p)
	}
	for _, a := range []Action{ActionStateRead, ActionStateWrite, ActionStateAdmin} {
		if !p.Permissions.AllowsNamespace(a, "x.y") {
			t.Errorf("bootstrap principal may not %s", a)
		}
	}
	if n := st.Notes(); len(n) != 0 {
		t.Errorf("a file Bootstrap wrote needed defaults: %q", n)
	}

	before, _ := os.ReadFile(r.PrincipalsPath)
	beforeC, _ := os.ReadFile(r.CredentialsPath)
	r2, err := Bootstrap(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Created {
		t.Errorf("second run: %+v", r2)
	}
	after, _ := os.ReadFile(r.PrincipalsPath)
	afterC, _ := os.ReadFile(r.CredentialsPath)
	if !bytes.Equal(before, after) || !bytes.Equal(beforeC, afterC) {
		t.Error("second run changed files")
	}
}

// skipWithoutModes skips a test of file modes where they mean nothing
// (Windows: the rule is the ACL, package ownerperm).
func skipWithoutModes(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("no file modes on this system")
	}
}

func TestBootstrapRefusesOpenDir(t *testing.T) {
	skipWithoutModes(t)
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	if _, err := Bootstrap(dir); !errors.Is(err, ErrInsecureFile) {
		t.Fatalf("Bootstrap(0755 dir) = %v", err)
	}
	if m := mode(t, dir); m != 0o755 {
		t.Errorf("dir mode changed to %04o", m)
	}
	if _, err := os.Stat(filepath.Join(dir, PrincipalsFile)); err == nil {
		t.Error("wrote into an open directory")
	}
}

func TestLoadCredential(t *testing.T) {
	skipWithoutModes(t)
	dir := t.TempDir()
	p := writeFile(t, dir, "c.json", `{"principal":"a","secret":"s"}`, 0o644)
	if _, err := LoadCredential(p); !errors.Is(err, ErrInsecureFile) {
		t.Errorf("0644: %v", err)
	}
	os.Chmod(p, 0o600)
	if c, err := LoadCredential(p); err != nil || c.Principal != "a" || c.Secret != "s" {
		t.Errorf("0600: %+v, %v", c, err)
	}
	p = writeFile(t, dir, "u.json", `{"principal":"a","secret":"s","x":1}`, 0o600)
	if _, err := LoadCredential(p); err == nil {
		t.Error("unknown field accepted")
	}
	p = writeFile(t, dir, "e.json", `{"secret":"s"}`, 0o600)
	if _, err := LoadCredential(p); err == nil {
		t.Error("empty principal accepted")
	}
}
