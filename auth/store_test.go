package auth

// The principals store: secrets and their hashes, secret and ed25519
// authentication, node patterns, loading errors and reloads.

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func mustSecret(t *testing.T) (string, string) {
	t.Helper()
	s, h, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // defeat umask
		t.Fatal(err)
	}
	return path
}

func TestNewSecretAndHash(t *testing.T) {
	s, h := mustSecret(t)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 {
		t.Fatalf("secret %q: %v, %d bytes", s, err, len(raw))
	}
	if h != HashSecret(s) || !strings.HasPrefix(h, "sha256:") || len(h) != 7+64 {
		t.Fatalf("hash %q", h)
	}
	if HashSecret("test") != "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" {
		t.Fatal("HashSecret does not match SHA-256 test vector")
	}
	s2, _ := mustSecret(t)
	if s == s2 {
		t.Fatal("two secrets equal")
	}
}

func TestAuthenticateSecret(t *testing.T) {
	secret, hash := mustSecret(t)
	st, err := NewStore([]Principal{{Name: "app", SecretHash: hash, Nodes: []Pattern{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Authenticate(Credential{Principal: "app", Secret: secret}, "node-1", nil)
	if err != nil || p.Name != "app" {
		t.Fatalf("right secret: %v, %v", p, err)
	}
	p.Nodes[0] = "mutated" // returned copy must not alias the store
	if _, err := st.Authenticate(Credential{Principal: "app", Secret: secret}, "node-1", nil); err != nil {
		t.Fatalf("store mutated through returned principal: %v", err)
	}

	bad := []struct {
		name   string
		c      Credential
		reason string
	}{
		{"wrong secret", Credential{Principal: "app", Secret: secret + "x"}, "wrong secret"},
		{"empty secret", Credential{Principal: "app"}, "wrong secret"},
		{"unknown principal", Credential{Principal: "ghost", Secret: secret}, "unknown principal"},
		{"signature to secret principal", Credential{Principal: "app", Secret: secret, Signature: []byte{1}}, "presented a signature"},
	}
	for _, b := range bad {
		_, err := st.Authenticate(b.c, "node-1", nil)
		if !errors.Is(err, ErrBadCredentials) {
			t.Errorf("%s: err = %v, want ErrBadCredentials", b.name, err)
			continue
		}
		if err.Error() != "auth: bad credentials" {
			t.Errorf("%s: text %q leaks detail", b.name, err.Error())
		}
		if r := Reason(err); !strings.Contains(r, b.reason) {
			t.Errorf("%s: Reason = %q, want it to contain %q", b.name, r, b.reason)
		}
	}
	if Reason(errors.New("other")) != "" || Reason(nil) != "" {
		t.Error("Reason of a foreign error should be empty")
	}

	var zero Store
	if _, err := zero.Authenticate(Credential{Principal: "app", Secret: secret}, "n", nil); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("zero Store: %v", err)
	}
}

func TestAuthenticateEd25519(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewStore([]Principal{{
		Name:      "signer",
		PublicKey: "ed25519:" + base64.StdEncoding.EncodeToString(pub),
		Nodes:     []Pattern{"*"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	nonce := []byte("server-nonce-1")
	sig := ed25519.Sign(priv, SignedMessage(nonce, "edge-1"))

	if p, err := st.Authenticate(Credential{Principal: "signer", Signature: sig}, "edge-1", nonce); err != nil || p.Name != "signer" {
		t.Fatalf("good signature: %v", err)
	}
	bad := []struct {
		name  string
		c     Credential
		node  string
		nonce []byte
	}{
		{"other nonce", Credential{Principal: "signer", Signature: sig}, "edge-1", []byte("server-nonce-2")},
		{"other node", Credential{Principal: "signer", Signature: sig}, "edge-2", nonce},
		{"empty nonce", Credential{Principal: "signer", Signature: ed25519.Sign(priv, SignedMessage(nil, "edge-1"))}, "edge-1", nil},
		{"no signature", Credential{Principal: "signer"}, "edge-1", nonce},
		{"secret instead", Credential{Principal: "signer", Secret: "x", Signature: sig}, "edge-1", nonce},
		{"truncated", Credential{Principal: "signer", Signature: sig[:63]}, "edge-1", nonce},
	}
	for _, b := range bad {
		_, err := st.Authenticate(b.c, b.node, b.nonce)
		if !errors.Is(err, ErrBadCredentials) || err.Error() != "auth: bad credentials" {
			t.Errorf("%s: err = %v", b.name, err)
		}
	}
}

func TestSignedMessage(t *testing.T) {
	got := string(SignedMessage([]byte("abc"), "n-1"))
	if want := "busbar-hello-v1\x00abc\x00n-1"; got != want {
		t.Fatalf("SignedMessage = %q, want %q", got, want)
	}
}

func TestAuthenticateNodes(t *testing.T) {
	secret, hash := mustSecret(t)
	st, err := NewStore([]Principal{
		{Name: "workers", SecretHash: hash, Nodes: []Pattern{"worker-*", "db-1"}},
		{Name: "nobody", SecretHash: hash},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		principal, node string
		want            error
	}{
		{"workers", "worker-1", nil},
		{"workers", "worker-abc-9", nil},
		{"workers", "db-1", nil},
		{"workers", "worker", ErrNodeNotAllowed},
		{"workers", "db-2", ErrNodeNotAllowed},
		{"workers", "xworker-1", ErrNodeNotAllowed},
		{"nobody", "worker-1", ErrNodeNotAllowed},
		{"workers", "", ErrBadNodeName},
		{"workers", "Worker-1", ErrBadNodeName},
		{"workers", "worker-", ErrBadNodeName},
		{"workers", "-a", ErrBadNodeName},
		{"workers", "a.b", ErrBadNodeName},
		{"workers", "worker-" + strings.Repeat("x", 57), ErrBadNodeName}, // 64 bytes
		{"workers", "worker-" + strings.Repeat("x", 56), nil},            // 63 bytes
		{"ghost", "Bad", ErrBadNodeName},                                 // node checked first
	}
	for _, tt := range tests {
		_, err := st.Authenticate(Credential{Principal: tt.principal, Secret: secret}, tt.node, nil)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s as %q: err = %v, want %v", tt.principal, tt.node, err, tt.want)
		}
		if errors.Is(err, ErrNodeNotAllowed) && !strings.Contains(err.Error(), tt.node) {
			t.Errorf("ErrNodeNotAllowed %q does not name node %q", err, tt.node)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	_, hash := mustSecret(t)
	key := "ed25519:" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	tests := []struct {
		name, json string
		want       []string // substrings of the error
	}{
		{"unknown field", `{"principals":[{"name":"a","secret_hash":"` + hash + `","nodse":["*"]}]}`, []string{"nodse"}},
		{"unknown top field", `{"principals":[],"extra":1}`, []string{"extra"}},
		{"duplicate", `{"principals":[{"name":"a","secret_hash":"` + hash + `"},{"name":"a","secret_hash":"` + hash + `"}]}`, []string{`principals[1] "a"`, "duplicate"}},
		{"both", `{"principals":[{"name":"a","secret_hash":"` + hash + `","public_key":"` + key + `"}]}`, []string{`"a"`, "not several"}},
		{"neither", `{"principals":[{"name":"a"}]}`, []string{`"a"`, "exactly one"}},
		{"bad pattern", `{"principals":[{"name":"a","secret_hash":"` + hash + `","permissions":{"subscribe":["x",">.y"]}}]}`, []string{`"a"`, "permissions.subscribe[1]"}},
		{"bad state pattern", `{"principals":[{"name":"a","secret_hash":"` + hash + `","permissions":{"state_write":["cfg.>.x"]}}]}`, []string{`"a"`, "permissions.state_write[0]"}},
		{"bad node pattern", `{"principals":[{"name":"a","secret_hash":"` + hash + `","nodes":["w*x"]}]}`, []string{`"a"`, "nodes[0]"}},
		{"bad name", `{"principals":[{"name":"A B","secret_hash":"` + hash + `"}]}`, []string{"field name"}},
		{"bad hash", `{"principals":[{"name":"a","secret_hash":"sha256:ABC"}]}`, []string{"secret_hash"}},
		{"uppercase hash", `{"principals":[{"name":"a","secret_hash":"` + strings.ToUpper(hash) + `"}]}`, []string{"secret_hash"}},
		{"bad key", `{"principals":[{"name":"a","public_key":"ed25519:AAAA"}]}`, []string{"public_key"}},
		{"trailing", `{"principals":[]} {}`, []string{"trailing"}},
		{"not json", `nope`, []string{"invalid"}},
	}
	dir := t.TempDir()
	for i, tt := range tests {
		path := writeFile(t, dir, "p"+string(rune('a'+i))+".json", tt.json, 0o600)
		_, err := Load(path)
		if err == nil {
			t.Errorf("%s: Load succeeded", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tt.name, err, w)
			}
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if runtime.GOOS == "windows" {
			break // no file modes: the rule is the ACL
		}
		path := writeFile(t, dir, "open.json", `{"principals":[]}`, mode)
		if _, err := Load(path); !errors.Is(err, ErrInsecureFile) {
			t.Errorf("mode %04o: err = %v, want ErrInsecureFile", mode, err)
		}
	}
	path := writeFile(t, dir, "ok.json", `{"principals":[{"name":"a","secret_hash":"`+hash+`","nodes":["*"],"permissions":{"send":[">"]}}]}`, 0o600)
	if _, err := Load(path); err != nil {
		t.Errorf("valid file: %v", err)
	}
	if _, err := NewStore([]Principal{{Name: "a"}}); err == nil {
		t.Error("NewStore accepted a principal with no proof")
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	s1, h1 := mustSecret(t)
	s2, h2 := mustSecret(t)
	file := func(name, hash string) string {
		return `{"principals":[{"name":"` + name + `","secret_hash":"` + hash + `","nodes":["*"]}]}`
	}
	path := writeFile(t, dir, PrincipalsFile, file("one", h1), 0o600)
	st, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	auth := func(name, secret string) error {
		_, err := st.Authenticate(Credential{Principal: name, Secret: secret}, "n", nil)
		return err
	}
	if err := auth("one", s1); err != nil {
		t.Fatal(err)
	}

	// Authenticate concurrently with Reload to let -race check the swap.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					auth("one", s1)
				}
			}
		})
	}
	writeFile(t, dir, PrincipalsFile, file("two", h2), 0o600)
	if err := st.Reload(path); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()

	if err := auth("one", s1); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("old principal after reload: %v", err)
	}
	if err := auth("two", s2); err != nil {
		t.Errorf("new principal after reload: %v", err)
	}

	// A bad file leaves the current set in force.
	writeFile(t, dir, PrincipalsFile, `{"principals":[{"name":"x"}]}`, 0o600)
	if err := st.Reload(path); err == nil {
		t.Fatal("Reload accepted invalid file")
	}
	if err := auth("two", s2); err != nil {
		t.Errorf("after failed reload: %v", err)
	}
}
