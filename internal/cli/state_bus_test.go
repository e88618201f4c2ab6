package cli

// `busbar state drop` and `busbar state owner` on a bus of brokers: two
// `busbar serve --nats` processes on a NATS cluster run in this test
// process; what one broker is told reaches the other.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

func TestStateDropAndOwnerAcrossBrokers(t *testing.T) {
	s1, s2 := startTwoBrokers(t)
	for _, ns := range []string{"home", "attic"} {
		if code, _, errOut := s1.busbar(t, "", "state", "set", ns, "lamp", "on", "--string", "--name", "cli-4242"); code != 0 {
			t.Fatalf("state set on b1: %s", errOut)
		}
	}
	awaitDump := func(s *server, what string, ok func(out string) bool) {
		t.Helper()
		testbroker.AwaitEvery(t, 20*time.Second, 100*time.Millisecond, what, func() error {
			code, out, errOut := s.busbar(t, "", "state", "dump")
			if code != 0 || !ok(out) {
				return fmt.Errorf("state dump: %d %s %s", code, out, errOut)
			}
			return nil
		})
	}
	awaitDump(s2, "b2 to hold both namespaces", func(out string) bool {
		return strings.Contains(out, `"ns":"home","owner":"cli-4242"`) && strings.Contains(out, `"ns":"attic","owner":"cli-4242"`)
	})

	if code, _, errOut := s2.busbar(t, "", "state", "drop", "attic"); code != 0 {
		t.Fatalf("state drop on b2: %s", errOut)
	}
	code, out, errOut := s2.busbar(t, "", "state", "owner", "home", "local")
	if code != 0 || !strings.Contains(out, `"owner":"local"`) {
		t.Fatalf("state owner on b2: %d %s%s", code, out, errOut)
	}
	awaitDump(s1, "b1 to drop attic and give home to local", func(out string) bool {
		return !strings.Contains(out, "attic") && strings.Contains(out, `"ns":"home","owner":"local"`)
	})
	if code, _, errOut := s1.busbar(t, "", "state", "set", "home", "lamp", "off", "--string"); code != 0 {
		t.Fatalf("a write on b1 by the new owner: %s", errOut)
	}
}
