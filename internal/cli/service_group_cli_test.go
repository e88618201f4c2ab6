package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

// TestReplyWorkersOfOneGroupShareRequests: three `busbar reply --service
// echoer --group pool` workers share the requests to the bare name
// echoer (it is not AMBIGUOUS), a third each within 20%; --group without
// --service is a usage error.
func TestReplyWorkersOfOneGroupShareRequests(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	if code, _, errOut := s.busbar(t, "", "reply", "work", "--echo", "--group", "pool"); code != exitUsage {
		t.Fatalf("--group without --service: exit %d %s", code, errOut)
	}
	workers := []string{"w1", "w2", "w3"}
	for _, w := range workers {
		s.background(t, "reply", "work", "--echo", "--name", w, "--service", "echoer", "--group", "pool")
		s.waitLs(t, w+" handling work", hasNode(w, "handlers", "work"))
	}
	testbroker.AwaitEvery(t, 10*time.Second, 50*time.Millisecond, "three instances of echoer, no collision", func() error {
		code, out, errOut := s.busbar(t, "", "ls", "--services", "--json")
		var list []serviceJSON
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			return fmt.Errorf("ls --services: exit %d %s %s", code, out, errOut)
		}
		n := 0
		for _, si := range list {
			if si.Service == "echoer" && si.Group == "pool" && !si.Collision {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("ls --services: %s", out)
		}
		return nil
	})
	const requests = 30
	got := map[string]int{}
	for range requests {
		code, out, errOut := s.busbar(t, "", "req", "echoer", "work", "hi", "--json")
		c := decodeCalls(t, out)
		if code != exitOK || len(c) != 1 {
			t.Fatalf("req echoer: exit %d %q %s", code, out, errOut)
		}
		got[c[0].Node]++
	}
	for _, w := range workers {
		if n := got[w]; n < requests/3*8/10 || n > requests/3*12/10 {
			t.Fatalf("%s answered %d of %d: %v", w, n, requests, got)
		}
	}
}
