package cli

// Namespaced (MoonBridge "namespace:path") channel names in every verb that
// takes a channel, through the built binary and a real `busbar serve`.

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerbsTakeNamespacedChannels(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	subOut, subWait := s.background(t, "sub", "myplugin:events", "--count", "2", "--json", "--name", "watcher")
	s.background(t, "reply", "myplugin:rpc", "--echo", "--service", "modsvc", "--name", "answerer")
	s.waitLs(t, "subscriber and handler", func(n []map[string]any) bool {
		return hasNode("watcher", "subscriptions", "myplugin:events")(n) && hasNode("answerer", "handlers", "myplugin:rpc")(n)
	})

	if code, out, errOut := s.busbar(t, "", "pub", "myplugin:events", "one"); code != 0 || !strings.Contains(out, "watcher ACCEPTED") {
		t.Fatalf("pub: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := s.busbar(t, "", "send", "watcher", "myplugin:events", "two"); code != 0 || !strings.HasPrefix(out, "ACCEPTED") {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}
	if err := subWait(); err != nil {
		t.Fatalf("sub: %v: %s", err, subOut.String())
	}
	lines := strings.Split(strings.TrimSpace(subOut.String()), "\n")
	for i, want := range []string{"one", "two"} {
		var m map[string]string
		if i >= len(lines) || json.Unmarshal([]byte(lines[i]), &m) != nil || m["channel"] != "myplugin:events" || m["payload"] != want {
			t.Fatalf("sub printed %q", subOut.String())
		}
	}

	for _, target := range []string{"answerer", "modsvc"} { // the node, then the announced service
		if code, out, errOut := s.busbar(t, "", "req", target, "myplugin:rpc", "ping"); code != 0 || out != "ping" {
			t.Fatalf("req %s: exit %d %q %s", target, code, out, errOut)
		}
	}
	if code, out, errOut := s.busbar(t, "", "ls", "--services"); code != 0 || !strings.Contains(out, "myplugin:rpc") {
		t.Fatalf("ls --services: exit %d\n%s%s", code, out, errOut)
	}

	// Past each edge of the grammar: bad input, refused before sending.
	for _, name := range []string{"MyPlugin:events", "a:b:c", ":events", "myplugin:", "bus:x"} {
		code, _, errOut := s.busbar(t, "", "req", "answerer", name, "x")
		if code != exitUsage || !strings.Contains(errOut, "invalid channel name") {
			t.Errorf("req on %q: exit %d, stderr %q", name, code, errOut)
		}
	}
	if code, _, errOut := s.busbar(t, "", "sub", "Bad:name"); code == 0 || !strings.Contains(errOut, "upper-case") {
		t.Errorf("sub Bad:name: exit %d, stderr %q", code, errOut)
	}
}
