package trueseal

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"testing"
)

func TestKeyIsCreatedOwnerOnlyOnFirstStartAndKeptAfter(t *testing.T) {
	dir := t.TempDir()
	k1, created, err := LoadOrCreateKey(dir)
	if err != nil || !created {
		t.Fatalf("first start: created %v, %v", created, err)
	}
	fi, err := os.Stat(KeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKey(dir)
	if err != nil || created {
		t.Fatalf("second start: created %v, %v", created, err)
	}
	if !bytes.Equal(k1.Private, k2.Private) || !bytes.Equal(k1.Public, k2.Public) {
		t.Fatal("the key changed between starts")
	}
	if len(PublicKeyText(k1.Public)) != 2*KeyBytes {
		t.Fatalf("public key text %q is not 64 hex digits", PublicKeyText(k1.Public))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the data directory holds %d files, want the key alone", len(entries))
	}
}

func TestKeyFileOthersCanReadIsRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("modes are ACLs there (package ownerperm)")
	}
	dir := t.TempDir()
	if _, _, err := LoadOrCreateKey(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(KeyPath(dir), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKey(dir); !errors.Is(err, ErrInsecureKey) {
		t.Fatalf("%v, want ErrInsecureKey", err)
	}
}

func TestKeyFileOfTrueSealRelayIsTakenAsItIs(t *testing.T) {
	// trueseal-relay -genkey writes the private key in hex and a newline;
	// X25519 of this key is the public key printed beside it.
	dir := t.TempDir()
	priv := "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a" // RFC 7748 §6.1, Alice
	pub := "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
	if err := os.WriteFile(KeyPath(dir), []byte(priv+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if PublicKeyText(k.Public) != pub {
		t.Fatalf("public key %s, want %s", PublicKeyText(k.Public), pub)
	}
}

func TestKeyFileThatIsNotAKeyIsRefused(t *testing.T) {
	for _, content := range []string{"", "zz\n", "0011\n", string(bytes.Repeat([]byte("a"), 2*KeyBytes+2))} {
		dir := t.TempDir()
		if err := os.WriteFile(KeyPath(dir), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateKey(dir); !errors.Is(err, ErrKeyFile) {
			t.Errorf("%q: %v, want ErrKeyFile", content, err)
		}
	}
}
