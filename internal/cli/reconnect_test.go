package cli

// The verbs that run until interrupted (sub, reply, state watch) keep
// running across a broker's death: the same broker started again on the
// same data directory, or the next broker of --server's list.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/internal/testbroker"
)

// crash kills serve with SIGKILL, as a crash.
func (s *server) crash() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}

// waitOutput polls a background verb's output until it holds text.
func waitOutput(t *testing.T, out *syncBuffer, what, text string) {
	t.Helper()
	testbroker.Await(t, 20*time.Second, what+" prints "+text, func() error {
		if !strings.Contains(out.String(), text) {
			return fmt.Errorf("its output so far:\n%s", out)
		}
		return nil
	})
}

// TestLongVerbsSurviveABrokerRestart: serve is killed and started again
// on the same data directory (the same socket); sub, reply (with its
// announced service), state watch and ls --watch say so on stderr,
// reconnect, and work as before.
func TestLongVerbsSurviveABrokerRestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	sub, _ := s.background(t, "sub", "news", "--name", "subber")
	rep, _ := s.background(t, "reply", "echo", "--echo", "--name", "replier", "--service", "echoer")
	watch, _ := s.background(t, "state", "watch", "cfg", "--name", "watcher")
	lsw, _ := s.background(t, "ls", "--watch", "--name", "lister")
	s.waitLs(t, "sub, reply and state watch", func(n []map[string]any) bool {
		return hasNode("subber", "subscriptions", "news")(n) && hasNode("replier", "handlers", "echo")(n) && hasAny(n, "watcher") && hasAny(n, "lister")
	})
	if code, _, errOut := s.busbar(t, "", "state", "set", "cfg", "k", "1", "--name", "setter"); code != 0 {
		t.Fatalf("state set: %d %s", code, errOut)
	}
	waitOutput(t, watch, "state watch", `"k":"k","v":1,`)

	s.crash()
	verbs := map[string]*syncBuffer{"sub": sub, "reply": rep, "state watch": watch, "ls": lsw}
	for name, out := range verbs {
		waitOutput(t, out, name, "busbar "+name+": connection lost")
	}
	s = startServe(t, data)
	for name, out := range verbs {
		waitOutput(t, out, name, "busbar "+name+": reconnected to unix://")
	}
	if code, _, errOut := s.busbar(t, "", "pub", "news", "after the restart"); code != 0 {
		t.Fatalf("pub: %d %s", code, errOut)
	}
	waitOutput(t, sub, "sub", "after the restart\n")
	if code, out, errOut := s.busbar(t, "", "req", "replier", "echo", "ping"); code != 0 || out != "ping" {
		t.Fatalf("req after the restart: %d %q %s", code, out, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "state", "set", "cfg", "k", "2", "--name", "setter"); code != 0 {
		t.Fatalf("state set: %d %s", code, errOut)
	}
	waitOutput(t, watch, "state watch", `"k":"k","v":2,`)
	if code, out, errOut := s.busbar(t, "", "ls", "--services"); code != 0 || !strings.Contains(out, "echoer.replier.bus") {
		t.Fatalf("the announcement after the restart: %d %q %s", code, out, errOut)
	}
}

// TestSubFailsOverToTheNextBroker: with two brokers in --server (sharing
// one principals file), sub moves to the second when the first dies.
func TestSubFailsOverToTheNextBroker(t *testing.T) {
	d1, d2 := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	s1 := startServe(t, d1)
	startServe(t, d2, "--principals", filepath.Join(d1, auth.PrincipalsFile))
	second := "unix://" + filepath.Join(d2, socketName)
	both := "unix://" + filepath.Join(d1, socketName) + "," + second
	sub, _ := s1.background(t, "sub", "news", "--name", "subber", "--server", both)
	s1.waitLs(t, "sub on the first broker", hasNode("subber", "subscriptions", "news"))
	s1.crash()
	waitOutput(t, sub, "sub", "busbar sub: reconnected to "+second)
	env := []string{"BUSBAR_DATA=" + d1, "BUSBAR_SERVER=" + second} // d1's credential, the second broker
	if code, out, errOut := runEnv(t, env, "", "pub", "news", "moved"); code != 0 || !strings.Contains(out, "subber ACCEPTED") {
		t.Fatalf("pub on the second broker: %d %q %s", code, out, errOut)
	}
	waitOutput(t, sub, "sub", "moved\n")
}

// TestTapSurvivesABrokerRestart: tap says it lost the broker, reconnects,
// asks for its tap again, and shows the traffic after the restart.
func TestTapSurvivesABrokerRestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	tap, _ := s.background(t, "tap", "orders.>", "--name", "tapper")
	waitOutput(t, tap, "tap", "busbar tap: tapping orders.>")
	s.crash()
	waitOutput(t, tap, "tap", "busbar tap: connection lost")
	s = startServe(t, data)
	waitOutput(t, tap, "tap", "busbar tap: reconnected to unix://")
	waitOutput(t, tap, "tap", "busbar tap: tapping orders.> again")
	if code, _, errOut := s.busbar(t, "", "pub", "orders.new", "after the restart", "--name", "alpha"); code != exitFail {
		t.Fatalf("pub: %d %s", code, errOut) // nobody subscribes: exit 1, and the tap sees it
	}
	waitOutput(t, tap, "tap", "after the restart")
}
