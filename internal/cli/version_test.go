package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"busbar/wire"
)

// A binary built with the version and commit set, as scripts/release
// builds one, prints them on `busbar version`, `--version` and `-V`
// alike, with the protocol versions.
func TestVersionSetAtBuildIsPrinted(t *testing.T) {
	const (
		want   = "v9.8.7-rc.1"
		commit = "0123456789abcdef0123456789abcdef01234567"
	)
	bin := filepath.Join(t.TempDir(), "busbar")
	ldflags := "-X busbar/internal/cli.version=" + want + " -X busbar/internal/cli.commit=" + commit
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "busbar/cmd/busbar").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var first string
	for _, arg := range []string{"version", "--version", "-V"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("busbar %s: %v", arg, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != 4 || lines[0] != "busbar "+want || lines[1] != "commit "+commit ||
			!strings.HasPrefix(lines[2], "protocol "+wire.ProtocolVersion+" ") {
			t.Fatalf("busbar %s printed:\n%s", arg, out)
		}
		if first == "" {
			first = string(out)
		} else if string(out) != first {
			t.Fatalf("busbar %s printed\n%s\nbut busbar version printed\n%s", arg, out, first)
		}
	}
}
