package cli

// busbar tap through the binary: the traffic of other verbs, as text and
// as JSON, and a principal without the tap permission refused.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"busbar/auth"
	"busbar/wire"
)

func TestTapPrintsTheTrafficOfOtherVerbs(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	s.background(t, "sub", "orders.new", "--name", "beta")
	s.waitLs(t, "subscriber", hasNode("beta", "subscriptions", "orders.new"))

	jsonOut, jsonDone := s.background(t, "tap", "--json", "--count", "2", "orders.>", "--name", "tapj")
	textOut, _ := s.background(t, "tap", "--node", "beta", "--name", "tapt")
	waitOutput(t, jsonOut, "tap --json", "busbar tap: tapping orders.>")
	waitOutput(t, textOut, "tap --node", "busbar tap: tapping every channel from or to beta")

	if code, out, errOut := s.busbar(t, "", "send", "beta", "orders.new", "hello", "--name", "alpha"); code != 0 {
		t.Fatalf("send: %d %s %s", code, out, errOut)
	}
	// Nobody subscribes to other.news: pub exits 1 (nobody accepted).
	if code, out, errOut := s.busbar(t, "", "pub", "other.news", "unseen", "--name", "alpha"); code != exitFail {
		t.Fatalf("pub: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := s.busbar(t, "", "pub", "orders.new", "world", "--name", "alpha"); code != 0 {
		t.Fatalf("pub: %d %s %s", code, out, errOut)
	}
	if err := jsonDone(); err != nil {
		t.Fatalf("tap --count 2: %v\n%s", err, jsonOut.String())
	}
	var evs []wire.TapEvent
	for line := range strings.SplitSeq(strings.TrimSpace(jsonOut.String()), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev wire.TapEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 2 || evs[0].Kind != "send" || evs[0].From != "alpha.bus" || evs[0].To != "beta" || string(evs[0].Preview) != "hello" ||
		evs[1].Kind != "publish" || evs[1].Channel != "orders.new" || string(evs[1].Preview) != "world" {
		t.Fatalf("tap --json: %+v", evs)
	}
	// The text tap follows beta: the send to it, not the publications
	// (they name no node: a publication has no target).
	waitOutput(t, textOut, "tap --node", ` send alpha.bus → beta orders.new 5B id=`)
	if strings.Contains(textOut.String(), "unseen") {
		t.Fatalf("the node filter let other traffic through:\n%s", textOut.String())
	}
}

func TestTapRefusesAPrincipalWithoutTheTapPermission(t *testing.T) {
	// A principals file written before the tap permission existed: its
	// principal may do everything else.
	shared := filepath.Join(t.TempDir(), "shared")
	if _, err := auth.Bootstrap(shared); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shared, auth.PrincipalsFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if dropKey(doc, "tap") != 1 {
		t.Fatalf("no tap permission to remove in %s", raw)
	}
	raw, _ = json.Marshal(doc)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--principals", path)
	code, _, errOut := s.busbar(t, "", "tap", "--credentials", filepath.Join(shared, auth.CredentialsFile))
	if code != exitRejected || !strings.Contains(errOut, "no tap permission") {
		t.Fatalf("tap without the permission: exit %d, want %d; %s", code, exitRejected, errOut)
	}
}

// dropKey deletes key from every object in v and counts the deletions.
func dropKey(v any, key string) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x[key]; ok {
			delete(x, key)
			n++
		}
		for _, e := range x {
			n += dropKey(e, key)
		}
	case []any:
		for _, e := range x {
			n += dropKey(e, key)
		}
	}
	return n
}
