package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// decodeCalls reads `--json` lines of pub, send or req.
func decodeCalls(t *testing.T, out string) []callJSON {
	t.Helper()
	var calls []callJSON
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var j callJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		calls = append(calls, j)
	}
	return calls
}

// TestCallVerbsPrintJSON: pub, send and req --json print one object per
// line, with node, result, id, rc, error and elapsed, on success and on
// failure, with the same exit statuses as without it.
func TestCallVerbsPrintJSON(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	s.background(t, "reply", "echo", "--echo", "--name", "echoer")
	s.background(t, "sub", "news", "--name", "watcher")
	s.waitLs(t, "the replier", hasNode("echoer", "handlers", "echo"))
	s.waitLs(t, "the subscriber", hasNode("watcher", "subscriptions", "news"))

	code, out, errOut := s.busbar(t, "", "req", "echoer", "echo", "hi", "--json")
	if c := decodeCalls(t, out); code != exitOK || len(c) != 1 || c[0].Node != "echoer" || c[0].Result != "OK" || c[0].ID == "" || c[0].Payload == nil || *c[0].Payload != "hi" || c[0].Elapsed <= 0 {
		t.Fatalf("req --json: exit %d %q %s", code, out, errOut)
	}
	code, out, _ = s.busbar(t, "", "req", "echoer", "nothing-here", "--json")
	if c := decodeCalls(t, out); code != exitNoHandler || len(c) != 1 || c[0].Result != "NO_HANDLER" || c[0].RC == 0 || c[0].Error == "" {
		t.Fatalf("req --json to no handler: exit %d %q", code, out)
	}

	code, out, _ = s.busbar(t, "", "send", "watcher", "news", "one", "--json")
	if c := decodeCalls(t, out); code != exitOK || len(c) != 1 || c[0].Node != "watcher" || c[0].Result != "ACCEPTED" || c[0].ID == "" {
		t.Fatalf("send --json: exit %d %q", code, out)
	}

	code, out, _ = s.busbar(t, "", "pub", "news", "two", "--json", "--name", "publisher")
	got := map[string]string{}
	for _, j := range decodeCalls(t, out) {
		if j.ID == "" || j.Elapsed <= 0 {
			t.Fatalf("pub --json: a line without id or elapsed: %q", out)
		}
		got[j.Node] = j.Result
	}
	if code != exitOK || len(got) != 3 || got["broker"] != "NO_SUBSCRIBER" || got["echoer"] != "NO_SUBSCRIBER" || got["watcher"] != "ACCEPTED" {
		t.Fatalf("pub --json: exit %d %q", code, out)
	}
}
