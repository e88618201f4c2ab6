package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/auth"
	"busbar/internal/testbroker"
)

// TestPrincipalVerbsTakeEffectAtOnce: a principal added with the CLI can
// connect as soon as the verb returns (it has the running broker reload
// its file), a connection open across the reload keeps working, and a
// removed one is refused as soon as remove returns.
func TestPrincipalVerbsTakeEffectAtOnce(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	keeper, keeperWait := s.background(t, "sub", "news", "--name", "keeper", "--count", "1")
	s.waitLs(t, "keeper", hasNode("keeper", "subscriptions", "news"))

	bob := filepath.Join(t.TempDir(), "bob.json")
	code, out, errOut := s.busbar(t, "", "principal", "add", "bob", "--nodes", "bob-*", "--publish", "orders.>", "--subscribe", "orders.>,news", "--tap", "orders.>", "--out", bob)
	if code != 0 || out != "" || !strings.Contains(errOut, "the running broker took it at once") {
		t.Fatalf("principal add: exit %d\n%s%s", code, out, errOut)
	}
	file, _ := os.ReadFile(filepath.Join(data, "principals.json"))
	if strings.Contains(string(file), `\u003e`) || !strings.Contains(string(file), `"orders.>"`) {
		t.Fatalf("principals.json:\n%s", file)
	}
	if fi, err := os.Stat(bob); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v", err, fi)
	}
	asBob := []string{"--credentials", bob, "--name", "bob-1"}
	if code, _, errOut := s.busbar(t, "", append([]string{"ls"}, asBob...)...); code != 0 {
		t.Fatalf("bob cannot connect once add returned: %s", errOut)
	}
	// The connection opened before the reload is still there.
	if code, out, _ := s.busbar(t, "", append([]string{"pub", "news", "hi"}, asBob...)...); code != exitRejected {
		t.Fatalf("bob may not publish news: exit %d %s", code, out)
	}
	if code, out, errOut := s.busbar(t, "", "pub", "news", "still here"); code != 0 || !strings.Contains(out, "keeper ACCEPTED") {
		t.Fatalf("pub after the reload: exit %d\n%s%s", code, out, errOut)
	}
	if err := keeperWait(); err != nil || keeper.String() != "still here\n" {
		t.Fatalf("keeper: %v %q", err, keeper)
	}

	code, out, _ = s.busbar(t, "", "principal", "list")
	if code != 0 || !strings.Contains(out, "bob    secret  bob-*  publish=orders.> subscribe=orders.>,news tap=orders.>\n") || !strings.Contains(out, "local  secret  *") {
		t.Fatalf("principal list: exit %d\n%s", code, out)
	}
	if code, _, errOut := s.busbar(t, "", "principal", "add", "bob"); code != exitFail || !strings.Contains(errOut, "exists") {
		t.Fatalf("adding bob twice: exit %d %s", code, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "principal", "add", "Bob"); code != exitUsage || !strings.Contains(errOut, "name") {
		t.Fatalf("an invalid name: exit %d %s", code, errOut)
	}
	if code, out, _ := s.busbar(t, "", "principal", "add", "carol", "--all"); code != 0 || !strings.Contains(out, `"principal": "carol"`) || !strings.Contains(out, `"secret": "`) {
		t.Fatalf("principal add printing the credentials: exit %d %s", code, out)
	}

	if code, _, errOut := s.busbar(t, "", "principal", "remove", "bob"); code != 0 || !strings.Contains(errOut, "the running broker took it at once") {
		t.Fatalf("principal remove: exit %d %s", code, errOut)
	}
	if code, _, _ := s.busbar(t, "", append([]string{"ls"}, asBob...)...); code == 0 {
		t.Fatal("bob still connects once remove returned")
	}
	if code, _, _ := s.busbar(t, "", "principal", "remove", "bob"); code != exitFail {
		t.Fatalf("removing bob twice: exit %d", code)
	}

	// With no broker running the file is edited all the same, for the
	// next start.
	s.stop(t)
	code, _, errOut = s.busbar(t, "", "principal", "add", "dave", "--all")
	if code != 0 || !strings.Contains(errOut, "no broker is running on "+data) || !strings.Contains(errOut, "the next start loads it") {
		t.Fatalf("add with no broker: exit %d %s", code, errOut)
	}
}

// TestServeReloadsPrincipalsOnHangup: a principals file edited by other
// means is taken on SIGHUP; a file that does not load leaves the
// principals in force.
func TestServeReloadsPrincipalsOnHangup(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	cred, err := auth.AddPrincipal(filepath.Join(data, "principals.json"), auth.Principal{Name: "erin", Nodes: []auth.Pattern{"*"}, Permissions: auth.AllPermissions()})
	if err != nil {
		t.Fatal(err)
	}
	erin := filepath.Join(t.TempDir(), "erin.json")
	if err := auth.WriteCredential(erin, cred); err != nil {
		t.Fatal(err)
	}
	asErin := []string{"--credentials", erin}
	if code, _, _ := s.busbar(t, "", append([]string{"ls"}, asErin...)...); code == 0 {
		t.Fatal("erin connected before the broker reloaded its principals")
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testbroker.AwaitEvery(t, 30*time.Second, 50*time.Millisecond, "erin to connect", func() error {
		if code, _, errOut := s.busbar(t, "", append([]string{"ls"}, asErin...)...); code != 0 {
			return &waitErr{errOut}
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(data, "principals.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 30*time.Second, "the failed reload's log line", func() bool {
		return strings.Contains(s.stderr.String(), "principals not reloaded")
	})
	if code, _, errOut := s.busbar(t, "", "ls"); code != 0 {
		t.Fatalf("ls after a failed reload: %s", errOut)
	}
}

type waitErr struct{ s string }

func (e *waitErr) Error() string { return e.s }

// TestServeLimitFlagsAtTheirEdges: --max-payload and --max-connections
// hold at their values and refuse one past them; a limit of 0 or less is
// bad input, and the queue must hold a whole payload.
func TestServeLimitFlagsAtTheirEdges(t *testing.T) {
	for _, args := range [][]string{{"--max-payload", "0"}, {"--max-connections", "-1"}, {"--max-queue-messages", "0"}, {"--max-queue-bytes", "0"}} {
		if code, _, errOut := runEnv(t, nil, "", append([]string{"serve", "--http", "off", "--data", filepath.Join(t.TempDir(), "d")}, args...)...); code != exitUsage || !strings.Contains(errOut, "positive") {
			t.Errorf("serve %v: exit %d %s", args, code, errOut)
		}
	}
	if code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", filepath.Join(t.TempDir(), "d"), "--max-payload", "1000", "--max-queue-bytes", "999"); code != exitFail || !strings.Contains(errOut, "MaxQueueBytes 999") {
		t.Errorf("queue smaller than a payload: exit %d %s", code, errOut)
	}

	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--max-payload", "1000", "--max-connections", "2", "--log-level", "debug")
	if code, out, errOut := s.busbar(t, strings.Repeat("x", 1000), "pub", "news", "-"); code != exitFail || out != "broker NO_SUBSCRIBER\n" {
		t.Fatalf("1000 bytes: exit %d %q %s", code, out, errOut)
	}
	if code, _, errOut := s.busbar(t, strings.Repeat("x", 1001), "pub", "news", "-"); code != exitUsage || !strings.Contains(errOut, "1001 bytes exceeds the broker's limit of 1000") {
		t.Fatalf("1001 bytes: exit %d %s", code, errOut)
	}
	// Two connections held: a third is refused; once one ends, the second
	// slot is free again.
	logged := func(what string) {
		testbroker.Eventually(t, 10*time.Second, what, func() bool { return strings.Contains(s.stderr.String(), what) })
	}
	s.background(t, "sub", "news", "--name", "one")
	logged(`msg="node connected" node=one`)
	// two runs until it is told to stop, not for a while: a busy machine
	// may take any time to start the third.
	two := exec.Command(binPath, "sub", "news", "--name", "two")
	two.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
	if err := two.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = two.Process.Kill(); _ = two.Wait() })
	logged(`msg="node connected" node=two`)
	if code, _, errOut := s.busbar(t, "", "ls"); code != exitFail || !strings.Contains(errOut, "limit of 2 connections") {
		t.Fatalf("a third connection: exit %d %s", code, errOut)
	}
	if err := two.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logged(`msg="node disconnected" node=two`)
	// The log line may precede the release of the slot by a moment.
	testbroker.AwaitEvery(t, 10*time.Second, 50*time.Millisecond, "a second connection", func() error {
		if code, out, errOut := s.busbar(t, "", "ls"); code != 0 || !strings.Contains(out, "one") {
			return &waitErr{out + errOut}
		}
		return nil
	})
}

// A broker running without its HTTP socket (--http-unix off) cannot be
// told: principal add says so and to send SIGHUP, exit 1, never that no
// broker runs.
func TestPrincipalAddSaysWhenTheRunningBrokerCannotBeTold(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--http-unix", "off")
	code, _, errOut := s.busbar(t, "", "principal", "add", "frank", "--all", "--out", filepath.Join(t.TempDir(), "frank.json"))
	if code != exitFail || !strings.Contains(errOut, "a broker is running on "+s.data) || !strings.Contains(errOut, "send it SIGHUP") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
