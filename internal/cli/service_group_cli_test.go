package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
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

// startWorker runs `busbar reply work --echo --service echoer --group
// pool` as node name on s, and returns what kills it (at once; again at
// cleanup, harmlessly).
func startWorker(t *testing.T, s *server, name string) (kill func()) {
	t.Helper()
	cmd := exec.Command(binPath, "reply", "work", "--echo", "--name", name, "--service", "echoer", "--group", "pool")
	cmd.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	kill = func() { _ = cmd.Process.Kill(); <-done }
	t.Cleanup(kill)
	return kill
}

// busClient connects a Go client as node to s's socket.
func busClient(t *testing.T, ctx context.Context, s *server, node string) *client.Client {
	t.Helper()
	c, err := dialBusClient(ctx, s, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dialBusClient connects a Go client as node to s's socket, returning
// the error; the caller closes the client.
func dialBusClient(ctx context.Context, s *server, node string) (*client.Client, error) {
	cred, err := auth.LoadCredential(filepath.Join(s.data, auth.CredentialsFile))
	if err != nil {
		return nil, err
	}
	return client.Connect(ctx, client.Options{Node: node, Server: "unix://" + filepath.Join(s.data, "busbar.sock"), Credential: cred})
}

// awaitWorkers waits until c's broker knows n instances of echoer, each
// with a handler of work.
func awaitWorkers(t *testing.T, ctx context.Context, c *client.Client, n int) {
	t.Helper()
	testbroker.AwaitEvery(t, 20*time.Second, 50*time.Millisecond, fmt.Sprintf("the broker to know %d workers", n), func() error {
		list, err := c.Whois(ctx, "echoer")
		if err != nil || len(list) != n {
			return fmt.Errorf("whois echoer: %d, %v", len(list), err)
		}
		nodes, err := c.Directory(ctx)
		if err != nil {
			return err
		}
		handlers := 0
		for _, node := range nodes {
			if strings.HasPrefix(node.Node, "w") && slices.Contains(node.Handlers, "work") {
				handlers++
			}
		}
		if handlers != n {
			return fmt.Errorf("%d workers handle work", handlers)
		}
		return nil
	})
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
		stops = append(stops, startWorker(t, s, fmt.Sprintf("w%d", i+1)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := busClient(t, ctx, b1, "caller")
	awaitWorkers(t, ctx, c, 3)
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
	awaitWorkers(t, ctx, c, 2)
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

// TestGroupWorkerKilledMidRunFailsOnlyItsRequests: three `busbar reply
// --group` workers, w1 and w2 on b1 and w3 on b2, take 3,000 requests
// made eight at a time on b1; one worker is killed once a third are
// answered: w1, on the callers' broker, or w3, on the other. Only
// requests open on it fail, DISCONNECT naming it (never replayed
// elsewhere), at most one per caller; every other request is answered
// once, with its own payload, and none made after the kill by it. (b1
// learns of w3's death a moment after b2: a request b1 sends w3's way
// meanwhile is refused by b2 before any worker saw it, and b1 gives it
// to another member.)
func TestGroupWorkerKilledMidRunFailsOnlyItsRequests(t *testing.T) {
	for _, victim := range []string{"w1", "w3"} {
		t.Run(victim, func(t *testing.T) { killWorkerMidRun(t, victim) })
	}
}

func killWorkerMidRun(t *testing.T, victim string) {
	b1, b2 := startTwoBrokers(t)
	kills := map[string]func(){}
	for i, s := range []*server{b1, b1, b2} {
		name := fmt.Sprintf("w%d", i+1)
		kills[name] = startWorker(t, s, name)
	}
	kill := kills[victim]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := busClient(t, ctx, b1, "caller")
	awaitWorkers(t, ctx, c, 3)
	ch := c.Scope("cli").Channel("work")

	const requests, callers = 3000, 8
	type outcome struct {
		node string // who answered; "" when it failed
		err  error
		late bool // made after w1 was killed
	}
	outcomes := make([]outcome, requests)
	var answered atomic.Int64
	killed := make(chan struct{})
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < requests; i = int(next.Add(1) - 1) {
				var late bool
				select {
				case <-killed:
					late = true
				default:
				}
				payload := fmt.Sprint("r", i)
				m, err := ch.Request(ctx, "echoer", []byte(payload))
				o := outcome{err: err, late: late}
				if err == nil {
					o.node = strings.TrimSuffix(m.From(), ".bus")
					if string(m.Payload()) != payload {
						o.err = fmt.Errorf("answered %q", m.Payload())
					}
					if answered.Add(1) == requests/3 {
						kill()
						close(killed)
					}
				}
				outcomes[i] = o
			}
		}()
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatal(victim + " was never killed")
	}
	got := map[string]int{}
	disconnected := 0
	for i, o := range outcomes {
		var re *client.RequestError
		switch {
		case o.err == nil:
			got[o.node]++
			if o.late && o.node == victim {
				t.Errorf("request %d, made after %s was killed, answered by it", i, victim)
			}
		case errors.As(o.err, &re) && re.Kind == wire.ResultDisconnect && strings.Contains(re.Text, victim+" disconnected"):
			disconnected++
		default:
			t.Errorf("request %d: %v", i, o.err)
		}
	}
	if disconnected > callers || got["w1"]+got["w2"]+got["w3"]+disconnected != requests {
		t.Fatalf("%d disconnected, answers %v, of %d requests", disconnected, got, requests)
	}
	t.Logf("answers %v, %d failed DISCONNECT", got, disconnected)
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
	if code, out, _ := s.busbar(t, "", "ls"); code != exitOK || !regexp.MustCompile(`(?m)^m1 .* news\[workers\] `).MatchString(out) {
		t.Fatalf("ls does not show the queue:\n%s", out)
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

// TestSubQueueMembersOnTwoBrokersShareEvents: three `busbar sub --queue`
// members, two on b1 and one on b2 of a bus, get each of 3,000 events
// published on b1 exactly once in all, a third each within 20%; every
// publication's results name one member ACCEPTED.
func TestSubQueueMembersOnTwoBrokersShareEvents(t *testing.T) {
	b1, b2 := startTwoBrokers(t)
	var outs []*syncBuffer
	for i, s := range []*server{b1, b1, b2} {
		out, _ := s.background(t, "sub", "news", "--queue", "workers", "--name", fmt.Sprintf("m%d", i+1))
		outs = append(outs, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := busClient(t, ctx, b1, "pub")
	testbroker.AwaitEvery(t, 20*time.Second, 50*time.Millisecond, "b1 to know the three members", func() error {
		nodes, err := c.Directory(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, node := range nodes {
			if node.Queues["news"] == "workers" {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d members known", n)
		}
		return nil
	})
	ch := c.Scope("cli").Channel("news")
	const events, publishers = 3000, 8
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, publishers)
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < events; i = next.Add(1) - 1 {
				res, err := ch.Publish(ctx, []byte(fmt.Sprint("e", i)))
				if err != nil {
					errs <- err
					return
				}
				given := 0
				for _, r := range res.Results {
					if strings.HasPrefix(r.Node, "m") && r.Result == wire.Accepted {
						given++
					}
				}
				if given != 1 {
					errs <- fmt.Errorf("event %d given to %d members: %+v", i, given, res.Results)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lines := func() (n int) {
		for _, out := range outs {
			n += len(strings.Fields(out.String()))
		}
		return n
	}
	testbroker.AwaitEvery(t, 20*time.Second, 50*time.Millisecond, "every event printed", func() error {
		if n := lines(); n < events {
			return fmt.Errorf("%d of %d events printed", n, events)
		}
		return nil
	})
	seen := map[string]int{}
	for i, out := range outs {
		words := strings.Fields(out.String())
		if n := len(words); n < events/3*8/10 || n > events/3*12/10 {
			t.Errorf("m%d got %d of %d", i+1, n, events)
		}
		for _, w := range words {
			seen[w]++
		}
	}
	if len(seen) != events {
		t.Fatalf("the queue got %d distinct events of %d", len(seen), events)
	}
	for e, n := range seen {
		if n != 1 {
			t.Fatalf("%s reached the queue %d times", e, n)
		}
	}
}
