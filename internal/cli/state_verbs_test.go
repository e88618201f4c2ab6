package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateSetFromTheCLIOwnsAsThePrincipal: two runs of `busbar state
// set` without --name write one namespace as one owner, the principal,
// so a namespace the CLI created is not left to a dead process; a value
// that is not JSON is refused unless --string says it is text.
func TestStateSetFromTheCLIOwnsAsThePrincipal(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	entry := func(out string) map[string]any {
		var e map[string]any
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatalf("not an entry: %q", out)
		}
		return e
	}
	for _, v := range []string{"1", "2"} {
		code, out, errOut := s.busbar(t, "", "state", "set", "cfg", "k", v)
		if code != 0 || entry(out)["src"] != "local" {
			t.Fatalf("state set %s: exit %d %s%s", v, code, out, errOut)
		}
	}
	if code, out, _ := s.busbar(t, "", "state", "dump", "cfg"); code != 0 || entry(out)["owner"] != "local" {
		t.Fatalf("dump: %s", out)
	}
	// --name still makes the owner explicit.
	if code, _, errOut := s.busbar(t, "", "state", "set", "cfg", "k", "3", "--name", "other"); code != exitRejected || !strings.Contains(errOut, "belongs to local") {
		t.Fatalf("a foreign writer: exit %d %s", code, errOut)
	}
	code, _, errOut := s.busbar(t, "", "state", "set", "cfg", "mode", "eco mode")
	if code != exitUsage || !strings.Contains(errOut, `value "eco mode" is not JSON`) || !strings.Contains(errOut, "--string") {
		t.Fatalf("a value that is not JSON: exit %d %s", code, errOut)
	}
	code, out, errOut := s.busbar(t, "", "state", "set", "cfg", "mode", "20.5", "--string")
	if code != 0 || entry(out)["v"] != "20.5" {
		t.Fatalf("--string: exit %d %s%s", code, out, errOut)
	}
	if code, out, _ := s.busbar(t, "", "state", "set", "cfg", "n", "20.5"); code != 0 || entry(out)["v"] != 20.5 {
		t.Fatalf("a JSON number: exit %d %s", code, out)
	}
}
