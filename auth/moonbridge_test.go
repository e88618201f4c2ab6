package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mbPrincipal(name, keyID, secret string) Principal {
	return Principal{Name: name, Nodes: []Pattern{"island-*"}, MoonBridge: &MoonBridgeKey{KeyID: keyID, Secret: secret},
		Permissions: Permissions{Send: []Pattern{"mb:*"}}}
}

func TestMoonBridgeKey(t *testing.T) {
	secret := strings.Repeat("s", MinMoonBridgeSecret)
	s, err := NewStore([]Principal{mbPrincipal("isl", "primary", secret)})
	if err != nil {
		t.Fatal(err)
	}
	p, got, ok := s.MoonBridgeKey("primary")
	if !ok || p.Name != "isl" || string(got) != secret {
		t.Fatalf("lookup: %v %q %v", p, got, ok)
	}
	if _, _, ok := s.MoonBridgeKey("other"); ok {
		t.Fatal("an unknown key id was found")
	}
	if !p.MayClaim("island-a") || p.MayClaim("island-") || p.MayClaim("other") || p.MayClaim("Island-A") {
		t.Fatal("MayClaim does not follow the node patterns")
	}
	// Such a principal cannot log in with busbar's own handshake.
	if _, err := s.Authenticate(Credential{Principal: "isl", Secret: secret}, "island-a", []byte("n")); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("busbar login with a MoonBridge key: %v", err)
	}
}

// The secret's length at and past its edges, the key id's, and a key id
// two principals share.
func TestMoonBridgeKeyLimits(t *testing.T) {
	ok := []Principal{
		mbPrincipal("a", "k", strings.Repeat("s", MinMoonBridgeSecret)),
		mbPrincipal("b", strings.Repeat("k", MaxMoonBridgeKeyID), strings.Repeat("s", MaxMoonBridgeSecret)),
	}
	for _, p := range ok {
		if _, err := NewStore([]Principal{p}); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	bad := []Principal{
		mbPrincipal("a", "k", strings.Repeat("s", MinMoonBridgeSecret-1)),
		mbPrincipal("a", "k", strings.Repeat("s", MaxMoonBridgeSecret+1)),
		mbPrincipal("a", strings.Repeat("k", MaxMoonBridgeKeyID+1), strings.Repeat("s", 40)),
		mbPrincipal("a", "", strings.Repeat("s", 40)),
		mbPrincipal("a", "k y", strings.Repeat("s", 40)),
	}
	for _, p := range bad {
		if _, err := NewStore([]Principal{p}); err == nil || !strings.Contains(err.Error(), "moonbridge") {
			t.Errorf("key %q secret of %d bytes: %v", p.MoonBridge.KeyID, len(p.MoonBridge.Secret), err)
		}
	}
	two := []Principal{mbPrincipal("a", "k", strings.Repeat("s", 40)), mbPrincipal("b", "k", strings.Repeat("t", 40))}
	if _, err := NewStore(two); err == nil || !strings.Contains(err.Error(), "key_id") {
		t.Errorf("shared key id: %v", err)
	}
	both := mbPrincipal("a", "k", strings.Repeat("s", 40))
	both.SecretHash = HashSecret("x")
	if _, err := NewStore([]Principal{both}); err == nil {
		t.Error("a principal with a secret hash and a MoonBridge key was taken")
	}
}

func TestAddMoonBridgePrincipal(t *testing.T) {
	path := filepath.Join(t.TempDir(), PrincipalsFile)
	if err := os.WriteFile(path, []byte(`{"principals":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := AddMoonBridgePrincipal(path, Principal{Name: "isl", Nodes: []Pattern{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	if k.KeyID != "isl" || len(k.Secret) < MinMoonBridgeSecret {
		t.Fatalf("key %q with a secret of %d bytes", k.KeyID, len(k.Secret))
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, secret, ok := s.MoonBridgeKey("isl"); !ok || string(secret) != k.Secret {
		t.Fatal("the key written is not the key returned")
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("principals file mode %v", fi.Mode())
	}
}
