package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"busbar/auth"
)

// `busbar principal add NAME --moonbridge` stores a MoonBridge key in the
// owner-only principals file and prints it as the backend plugin's
// config.yml takes it.
func TestPrincipalAddMoonBridge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "principals.json")
	if err := os.WriteFile(path, []byte(`{"principals":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "principal", "add", "island-a", "--principals", path, "--moonbridge", "--nodes", "island-a", "--send", "mb:*")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	secret := regexp.MustCompile(`(?m)^secret: "([^"]+)"$`).FindStringSubmatch(out)
	for _, line := range []string{`instanceId: "island-a"`, `backendName: "island-a"`, `keyId: "island-a"`} {
		if !strings.Contains(out, line) {
			t.Fatalf("output lacks %q:\n%s", line, out)
		}
	}
	if secret == nil || len(secret[1]) < auth.MinMoonBridgeSecret {
		t.Fatalf("no secret of %d bytes or more:\n%s", auth.MinMoonBridgeSecret, out)
	}
	s, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, got, ok := s.MoonBridgeKey("island-a")
	if !ok || string(got) != secret[1] || !p.MayClaim("island-a") || p.MayClaim("island-b") {
		t.Fatalf("stored key: %v %v", p, ok)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if strings.Contains(errOut, secret[1]) {
		t.Fatal("the secret went to stderr")
	}
	code, out, _ = run(t, "", "principal", "list", "--principals", path)
	if code != 0 || !strings.Contains(out, "moonbridge") || strings.Contains(out, secret[1]) {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, "", "principal", "add", "x", "--principals", path, "--moonbridge", "--out", filepath.Join(t.TempDir(), "c")); code != exitUsage {
		t.Fatalf("--moonbridge with --out: exit %d", code)
	}
}
