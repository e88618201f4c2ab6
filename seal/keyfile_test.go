package seal

// The key file: modes on disk, refusal of loose modes and of damage, no
// overwrite, and that a loaded identity is the saved one.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestSaveLoad(t *testing.T) {
	id := fixedIdentity(t, 1)
	dir := filepath.Join(t.TempDir(), "device")
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{dir: 0o700, filepath.Join(dir, KeyFile): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if checkFileModes && fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, KeyFile)); fi.Size() != keyFileSize || keyFileSize != 89 {
		t.Fatalf("key file is %d bytes, want %d", fi.Size(), keyFileSize)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the key file", len(entries))
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != id.ID() || !got.Public().Equal(id.Public()) {
		t.Fatal("loaded identity is another device")
	}
	// The loaded private keys work: it opens what is sealed to the original
	// and signs what the original's public key verifies.
	m := group(t, "home", got, fixedIdentity(t, 2))
	blob := mustSeal(t, fixedIdentity(t, 2), id.Public(), mustMessage(t, KindSync, "home", []byte("x")))
	if _, err := Open(got, blob, m); err != nil {
		t.Fatal(err)
	}
	own, err := NewGroup(got, "mine", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Verify(nil); err != nil || own.members[0].ID() != id.ID() {
		t.Fatalf("a manifest signed by the loaded key: %v", err)
	}
}

// checkFileModes: the tests that set modes mean something only where
// modes do (Windows's rule is the ACL: package ownerperm).
const checkFileModes = runtime.GOOS != "windows"

func TestSaveNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	if err := fixedIdentity(t, 1).Save(dir); err != nil {
		t.Fatal(err)
	}
	wantErr(t, fixedIdentity(t, 2).Save(dir), ErrKeyExists)
	got, err := Load(dir)
	if err != nil || got.ID() != fixedIdentity(t, 1).ID() {
		t.Fatalf("key file changed: %v", err)
	}
}

func TestSaveRefusesDirectoryOthersCanWrite(t *testing.T) {
	if !checkFileModes {
		t.Skip("no mode bits on this system")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	err := fixedIdentity(t, 1).Save(dir)
	wantErr(t, err, ErrInsecureKeyFile)
	if !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("error does not say how to fix it: %v", err)
	}
}

func TestLoadRefusesLooseModes(t *testing.T) {
	if !checkFileModes {
		t.Skip("no mode bits on this system")
	}
	dir := t.TempDir()
	if err := fixedIdentity(t, 1).Save(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KeyFile)
	for _, mode := range []fs.FileMode{0o644, 0o640, 0o604, 0o610, 0o601, 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		wantErr(t, err, ErrInsecureKeyFile)
		if !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %04o: error does not say how to fix it: %v", mode, err)
		}
	}
	for _, mode := range []fs.FileMode{0o600, 0o400} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err != nil {
			t.Fatalf("mode %04o refused: %v", mode, err)
		}
	}
}

func TestLoadRefusesDamage(t *testing.T) {
	good := fixedIdentity(t, 1).keyFileBytes()
	other := fixedIdentity(t, 2).ID()
	flip := func(i int) []byte { b := append([]byte(nil), good...); b[i] ^= 1; return b }
	cases := map[string][]byte{
		"empty":        nil,
		"truncated":    good[:len(good)-1],
		"extended":     append(append([]byte(nil), good...), 0),
		"magic":        flip(0),
		"format":       flip(4),
		"signing seed": flip(5),
		"sealing seed": flip(5 + 32),
		"device id":    flip(len(good) - 1),
		"another id":   append(good[:len(good)-DeviceIDSize:len(good)-DeviceIDSize], other[:]...),
	}
	for name, data := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, KeyFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestLoadMissingOrNotAFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing key file: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, KeyFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory as key file: %v", err)
	}
}
