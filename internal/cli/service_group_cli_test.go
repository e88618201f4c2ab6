package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
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

// TestGroupWorkersOnTwoBrokersShareRequests: three `busbar reply --group`
// workers, two on broker b1 and one on b2 of a bus, share 3,000 requests
// made on b1 to the bare service name within 20% of an even split, none
// lost and none answered twice; once a worker is killed, the requests go
// to the other two.
func TestGroupWorkersOnTwoBrokersShareRequests(t *testing.T) {
	b1, b2 := startTwoBrokers(t)
	var stops []func()
	for i, s := range []*server{b1, b1, b2} {
		name := fmt.Sprintf("w%d", i+1)
		cmd := exec.Command(binPath, "reply", "work", "--echo", "--name", name, "--service", "echoer", "--group", "pool")
		cmd.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() { _ = cmd.Process.Kill(); <-done }
		t.Cleanup(stop)
		stops = append(stops, stop)
	}
	cred, err := auth.LoadCredential(filepath.Join(b1.data, auth.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{Node: "caller", Server: "unix://" + filepath.Join(b1.data, "busbar.sock"), Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testbroker.AwaitEvery(t, 20*time.Second, 50*time.Millisecond, "b1 to know the three workers", func() error {
		list, err := c.Whois(ctx, "echoer")
		if err != nil || len(list) != 3 {
			return fmt.Errorf("whois echoer on b1: %d, %v", len(list), err)
		}
		nodes, err := c.Directory(ctx)
		if err != nil {
			return err
		}
		handlers := 0
		for _, n := range nodes {
			if strings.HasPrefix(n.Node, "w") && slices.Contains(n.Handlers, "work") {
				handlers++
			}
		}
		if handlers != 3 {
			return fmt.Errorf("%d workers handle work", handlers)
		}
		return nil
	})
	ch := c.Scope("cli").Channel("work")
	const requests = 3000
	got := map[string]int{}
	for range requests {
		m, err := ch.Request(ctx, "echoer", nil)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got[strings.TrimSuffix(m.From(), ".bus")]++
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		if n := got[w]; n < requests/3*8/10 || n > requests/3*12/10 {
			t.Fatalf("%s answered %d of %d: %v", w, got[w], requests, got)
		}
	}
	t.Logf("3,000 requests on b1: %v", got)

	// w3 (on b2) killed: the others take every request once b1 knows.
	stops[2]()
	testbroker.AwaitEvery(t, 20*time.Second, 50*time.Millisecond, "b1 to drop w3", func() error {
		if list, err := c.Whois(ctx, "echoer"); err != nil || len(list) != 2 {
			return fmt.Errorf("whois echoer on b1: %d, %v", len(list), err)
		}
		return nil
	})
	after := map[string]int{}
	for range 300 {
		m, err := ch.Request(ctx, "echoer", nil)
		if err != nil {
			t.Fatalf("with w3 gone, after %v: %v", after, err)
		}
		after[strings.TrimSuffix(m.From(), ".bus")]++
	}
	if after["w3"] != 0 || after["w1"]+after["w2"] != 300 {
		t.Fatalf("with w3 gone: %v", after)
	}
}

// TestSubQueueMembersShareEvents: three `busbar sub --queue` members of
// one queue share 30 publications, 10 each, every one once; `ls --json`
// shows the membership.
func TestSubQueueMembersShareEvents(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	type member struct {
		out  *syncBuffer
		wait func() error
	}
	var members []member
	for i := range 3 {
		name := fmt.Sprintf("m%d", i+1)
		out, wait := s.background(t, "sub", "news", "--queue", "workers", "--count", "10", "--name", name)
		members = append(members, member{out, wait})
		s.waitLs(t, name+" in the queue", func(nodes []map[string]any) bool {
			for _, n := range nodes {
				if q, _ := n["queues"].(map[string]any); n["node"] == name && q["news"] == "workers" {
					return true
				}
			}
			return false
		})
	}
	for i := range 30 {
		if code, out, errOut := s.busbar(t, "", "pub", "news", fmt.Sprint("e", i)); code != exitOK {
			t.Fatalf("pub %d: exit %d %s %s", i, code, out, errOut)
		}
	}
	seen := map[string]int{}
	for i, m := range members {
		if err := m.wait(); err != nil {
			t.Fatalf("member %d: %v\n%s", i+1, err, m.out)
		}
		for _, line := range strings.Fields(m.out.String()) {
			seen[line]++
		}
	}
	if len(seen) != 30 {
		t.Fatalf("the queue got %d distinct events of 30: %v", len(seen), seen)
	}
	for e, n := range seen {
		if n != 1 {
			t.Fatalf("%s reached the queue %d times", e, n)
		}
	}
}
