package cli

// `busbar serve --nats`: two broker processes joined through a NATS
// cluster (run in this test process), and `busbar ls` on either listing
// the nodes of both, each with its broker.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/wire"
)

// startTwoBrokers starts a three-server NATS cluster in this process and
// two `busbar serve --nats` processes on it: b1 through the first server,
// b2 through the other two; short heartbeats and leases, and one bus key
// file, sealing.
func startTwoBrokers(t *testing.T) (b1, b2 *server) {
	t.Helper()
	nats := testnats.Start(t, 3)
	key := filepath.Join(t.TempDir(), "bus.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bus := []string{"--nats-heartbeat", "100ms", "--nats-lease", "500ms", "--nats-bus-key", key, "--nats-bus-seal"}
	b1 = startServe(t, filepath.Join(t.TempDir(), "b1"), append([]string{"--name", "b1", "--nats", nats.URL(0)}, bus...)...)
	b2 = startServe(t, filepath.Join(t.TempDir(), "b2"), append([]string{"--name", "b2", "--nats", nats.URL(1) + "," + nats.URL(2)}, bus...)...)
	return b1, b2
}

func TestServeJoinsABusThroughNATS(t *testing.T) {
	s1, s2 := startTwoBrokers(t)
	s2.background(t, "sub", "news", "--name", "watcher")
	testbroker.AwaitEvery(t, 20*time.Second, 100*time.Millisecond, "b1 to list b2's node", func() error {
		code, out, errOut := s1.busbar(t, "", "ls", "--json")
		if code != 0 {
			return fmt.Errorf("ls: %s", errOut)
		}
		var nodes []wire.NodeInfo
		if err := json.Unmarshal([]byte(out), &nodes); err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Node == "watcher" && n.Broker == "b2" && strings.Join(n.Subscriptions, ",") == "news" {
				return nil
			}
		}
		return fmt.Errorf("b1 lists %s", out)
	})
	code, out, _ := s1.busbar(t, "", "ls")
	if code != 0 || !strings.HasPrefix(out, "NODE  ") || !strings.Contains(out, "BROKER") {
		t.Fatalf("ls: %d\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "watcher" && f[1] != "b2" {
			t.Fatalf("ls lists watcher on %s:\n%s", f[1], out)
		}
	}

	// State written through one broker is read through the other.
	if code, _, errOut := s1.busbar(t, "", "state", "set", "home", "lamp", "on", "--string", "--name", "switch"); code != 0 {
		t.Fatalf("state set on b1: %s", errOut)
	}
	testbroker.AwaitEvery(t, 20*time.Second, 100*time.Millisecond, "b2 to read the lamp", func() error {
		code, out, errOut := s2.busbar(t, "", "state", "get", "home", "lamp")
		if code != 0 || !strings.Contains(out, `"v":"on"`) {
			return fmt.Errorf("state get on b2: %d %s %s", code, out, errOut)
		}
		return nil
	})

	// b2 is killed: no goodbye. Its node leaves b1's directory when its
	// lease runs out.
	s2.kill(t)
	testbroker.AwaitEvery(t, 20*time.Second, 100*time.Millisecond, "b1 to drop b2's node", func() error {
		if _, out, _ := s1.busbar(t, "", "ls"); strings.Contains(out, "watcher") {
			return fmt.Errorf("b1 still lists:\n%s", out)
		}
		return nil
	})
}

func TestServeNATSNeedsAName(t *testing.T) {
	code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", filepath.Join(t.TempDir(), "d"), "--nats", "nats://127.0.0.1:1")
	if code != exitUsage || !strings.Contains(errOut, "--nats needs --name") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestServeNATSUnreachableFails(t *testing.T) {
	code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", filepath.Join(t.TempDir(), "d"), "--tcp", "off", "--name", "b1", "--nats", "nats://127.0.0.1:1")
	if code != exitFail || !strings.Contains(errOut, "cannot join the bus") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// A bus key file is checked before NATS is dialled: one others may read,
// or one too short, refuses to start, as --nats-bus-seal without a key.
func TestServeNATSBusKeyIsChecked(t *testing.T) {
	dir := t.TempDir()
	open, short := filepath.Join(dir, "open.key"), filepath.Join(dir, "short.key")
	if err := os.WriteFile(open, []byte(strings.Repeat("k", 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte(strings.Repeat("k", 31)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats-bus-key", short}, "fewer than 32"},
		{[]string{"--nats-bus-key", filepath.Join(dir, "missing.key")}, "no such file"},
		{[]string{"--nats-bus-seal"}, "--nats-bus-seal needs --nats-bus-key"},
	} {
		args := append([]string{"serve", "--http", "off", "--data", filepath.Join(dir, "d"), "--name", "b1", "--nats", "nats://127.0.0.1:1"}, tc.args...)
		if code, _, errOut := runEnv(t, nil, "", args...); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d: %s", tc.args, code, errOut)
		}
	}
	if runtime.GOOS != "windows" {
		code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", filepath.Join(dir, "d"), "--name", "b1", "--nats", "nats://127.0.0.1:1", "--nats-bus-key", open)
		if code != exitUsage || !strings.Contains(errOut, "other users could read it") {
			t.Errorf("a key file of mode 0644: exit %d: %s", code, errOut)
		}
	}
}

// --nats-relays reaches the broker: a name no broker can have is refused
// at start, before NATS is dialled.
func TestServeNATSRelaysAreChecked(t *testing.T) {
	code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", filepath.Join(t.TempDir(), "d"), "--name", "b1",
		"--nats", "nats://127.0.0.1:1", "--nats-relays", "b1,b.2")
	if code != exitFail || !strings.Contains(errOut, `"b.2" is not a broker name`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
