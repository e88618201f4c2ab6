package auth

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Adding and removing principals keeps the file valid, every other entry
// as written, patterns unescaped, and the new secret working.
func TestAddAndRemovePrincipalEditTheFile(t *testing.T) {
	dir := t.TempDir()
	boot, err := Bootstrap(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	path := boot.PrincipalsPath
	// An entry that predates the state lists must keep their absence.
	data, _ := os.ReadFile(path)
	old := `{"name": "legacy", "secret_hash": "sha256:` + strings.Repeat("0", 64) + `", "nodes": ["legacy"], "permissions": {"publish": ["a.\u003e"]}}`
	data = []byte(strings.Replace(string(data), `"principals": [`, `"principals": [`+old+`,`, 1))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cred, err := AddPrincipal(path, Principal{Name: "bob", Nodes: []Pattern{"bob-*"}, Permissions: Permissions{Subscribe: []Pattern{"orders.>"}}})
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(path)
	if strings.Contains(string(text), `\u003e`) || !strings.Contains(string(text), `"orders.>"`) {
		t.Fatalf("principals file escapes '>':\n%s", text)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	st, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Authenticate(cred, "bob-1", nil); err != nil {
		t.Fatalf("the new credential: %v", err)
	}
	if len(st.Notes()) != 1 || !strings.Contains(st.Notes()[0], "legacy") {
		t.Fatalf("the legacy entry lost its default: notes %q", st.Notes())
	}
	if _, err := AddPrincipal(path, Principal{Name: "bob", Nodes: []Pattern{"*"}}); !errors.Is(err, ErrPrincipalExists) {
		t.Fatalf("second bob: %v", err)
	}
	if _, err := AddPrincipal(path, Principal{Name: "Bad Name", Nodes: []Pattern{"*"}}); err == nil {
		t.Fatal("an invalid name was written")
	}
	ps, err := ListPrincipals(path)
	if err != nil || len(ps) != 3 || ps[0].Name != "bob" || ps[1].Name != "legacy" || ps[2].Name != "local" {
		t.Fatalf("list: %v %v", ps, err)
	}
	if err := RemovePrincipal(path, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := RemovePrincipal(path, "bob"); !errors.Is(err, ErrNoPrincipal) {
		t.Fatalf("remove twice: %v", err)
	}
	if st, err = Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Authenticate(cred, "bob-1", nil); err == nil {
		t.Fatal("a removed principal still authenticates")
	}
	boottext, _ := os.ReadFile(path)
	if strings.Contains(string(boottext), `\u003e`) {
		t.Fatalf("bootstrapped entry escapes '>':\n%s", boottext)
	}
	// A credentials file is never replaced.
	cp := filepath.Join(dir, "bob.json")
	if err := WriteCredential(cp, cred); err != nil {
		t.Fatal(err)
	}
	if err := WriteCredential(cp, cred); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write: %v", err)
	}
	if got, err := LoadCredential(cp); err != nil || got.Principal != cred.Principal || got.Secret != cred.Secret {
		t.Fatalf("read back %+v %v", got, err)
	}
}
