package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/internal/testbroker"
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

// TestStateOwnerAndDrop: a namespace left to a node that is gone is given
// to another owner or dropped by a principal with state_admin on it, both
// kept across a restart; one without state_admin is refused.
func TestStateOwnerAndDrop(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	if code, _, errOut := s.busbar(t, "", "state", "set", "home", "target", "20", "--name", "cli-4242"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := s.busbar(t, "", "state", "set", "home", "target", "21"); code != exitRejected || !strings.Contains(errOut, "belongs to cli-4242") {
		t.Fatalf("a write after the owner died: exit %d %s", code, errOut)
	}
	code, out, errOut := s.busbar(t, "", "state", "owner", "home", "local")
	if code != 0 || !strings.Contains(out, `"owner":"local"`) || !strings.Contains(out, `"v":20`) {
		t.Fatalf("state owner: exit %d %s%s", code, out, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "state", "set", "home", "target", "21"); code != 0 {
		t.Fatalf("a write by the new owner: %s", errOut)
	}
	if code, _, errOut := s.busbar(t, "", "state", "set", "attic", "lamp", "1", "--name", "cli-4243"); code != 0 {
		t.Fatal(errOut)
	}

	// Without state_admin: refused.
	limited := filepath.Join(t.TempDir(), "limited.json")
	if code, _, errOut := s.busbar(t, "", "principal", "add", "limited", "--state-read", ">", "--state-write", ">", "--out", limited); code != 0 {
		t.Fatal(errOut)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	asLimited := []string{"--credentials", limited, "--name", "limited-1"}
	testbroker.AwaitEvery(t, 10*time.Second, 50*time.Millisecond, "the limited principal", func() error {
		code, _, errOut := s.busbar(t, "", append([]string{"state", "drop", "attic"}, asLimited...)...)
		if code == exitRejected && strings.Contains(errOut, "not permitted to state-admin namespace attic") {
			return nil
		}
		return &waitErr{errOut}
	})
	if code, _, errOut := s.busbar(t, "", append([]string{"state", "owner", "attic", "limited-1"}, asLimited...)...); code != exitRejected {
		t.Fatalf("owner without state_admin: exit %d %s", code, errOut)
	}

	if code, _, errOut := s.busbar(t, "", "state", "drop", "attic"); code != 0 {
		t.Fatalf("state drop: %s", errOut)
	}
	if code, _, errOut := s.busbar(t, "", "state", "drop", "attic"); code != exitRejected || !strings.Contains(errOut, `no namespace "attic"`) {
		t.Fatalf("dropping twice: exit %d %s", code, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "state", "owner", "home", "Not_A_Node"); code != exitUsage || !strings.Contains(errOut, "invalid node name") {
		t.Fatalf("an invalid owner: exit %d %s", code, errOut)
	}

	// Both are on disk.
	s.stop(t)
	s2 := startServe(t, data)
	code, out, _ = s2.busbar(t, "", "state", "dump")
	if code != 0 || !strings.Contains(out, `"ns":"home","owner":"local"`) || strings.Contains(out, "attic") {
		t.Fatalf("after a restart: %s", out)
	}
}
