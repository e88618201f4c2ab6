package client_test

// Service groups (docs/discovery.md#service-groups): instances of a
// service that declare one group share the requests to its bare name.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
	"busbar/internal/testclient"
	"busbar/wire"
)

// worker connects node at p's broker i, handles channel "work" answering
// its own name, counts what it answered in got, and announces service
// "echoer" in group (none when "").
func worker(t *testing.T, p testbus.Placement, i int, node, group string, got *sync.Map) *client.Client {
	t.Helper()
	c := connect(t, p.At(i), node)
	ctx := ctxT(t, testbus.Settle)
	if _, err := c.Scope("s").Channel("work").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
		n, _ := got.LoadOrStore(node, new(int64))
		mu.Lock()
		*n.(*int64)++
		mu.Unlock()
		return []byte(node), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Announce(ctx, wire.Announcement{Service: "echoer", Group: group, Channels: []string{"work"}}); err != nil {
		t.Fatal(err)
	}
	return c
}

var mu sync.Mutex // guards the counts in the workers' maps

func count(got *sync.Map, node string) int64 {
	n, ok := got.Load(node)
	if !ok {
		return 0
	}
	mu.Lock()
	defer mu.Unlock()
	return *n.(*int64)
}

// awaitMembers waits until the caller's broker resolves "echoer" to n
// instances (whois), so every member is known before the requests.
func awaitMembers(t *testing.T, p testbus.Placement, caller *client.Client, n int) {
	t.Helper()
	p.Settled(t, fmt.Sprintf("%d instances of echoer", n), func() error {
		list, err := caller.Whois(ctxT(t, testbus.Settle), "echoer")
		if err != nil || len(list) != n {
			return fmt.Errorf("whois echoer: %d instances, %v", len(list), err)
		}
		for _, s := range list {
			if s.Collision {
				return fmt.Errorf("%s flagged as a collision", s.Provenance.Node)
			}
		}
		return nil
	})
}

// TestServiceGroupSharesRequestsEvenly: three instances of one group
// share 300 requests to the bare service name, a third each within 20%,
// none lost or answered twice, and none is flagged a collision; each
// member is still reachable by its own address. On a bus each member is
// on a broker of its own.
func TestServiceGroupSharesRequestsEvenly(t *testing.T) {
	testbus.EachTopology(t, testOpts(), func(t *testing.T, p testbus.Placement) {
		var got sync.Map
		members := []string{"w1", "w2", "w3"}
		for i, node := range members {
			worker(t, p, i, node, "pool", &got)
		}
		caller := connect(t, p.At(3), "caller")
		awaitMembers(t, p, caller, 3)
		p.Sees(t, "w1", "w2", "w3")
		ctx := ctxT(t, testbus.Settle)
		ch := caller.Scope("c").Channel("work")
		const requests = 300
		answers := map[string]int{}
		for range requests {
			m, err := ch.Request(ctx, "echoer", nil)
			if err != nil {
				t.Fatal(err)
			}
			answers[string(m.Payload())]++
		}
		total := 0
		for _, node := range members {
			n := answers[node]
			total += n
			if n < requests/3*8/10 || n > requests/3*12/10 {
				t.Errorf("%s answered %d of %d requests: %v", node, n, requests, answers)
			}
			if c := count(&got, node); c != int64(n) {
				t.Errorf("%s handled %d, its answers reached the caller %d times", node, c, n)
			}
		}
		if total != requests {
			t.Fatalf("%d answers for %d requests: %v", total, requests, answers)
		}
		// The caller's broker counts what it sent each member.
		sent := map[string]int{}
		for _, g := range p.At(3).Broker.GroupRequests() {
			if g.Service != "echoer" || g.Group != "pool" {
				t.Fatalf("group requests of %+v", g)
			}
			sent[g.Node] = int(g.Requests)
		}
		if fmt.Sprint(sent) != fmt.Sprint(answers) {
			t.Fatalf("the broker counts %v sent, the members answered %v", sent, answers)
		}
		if m, err := ch.Request(ctx, "echoer.w2.bus", nil); err != nil || string(m.Payload()) != "w2" {
			t.Fatalf("a member by its address: %v", err)
		}
	})
}

// TestServiceGroupRules: instances of different groups, or one without,
// collide and the bare name is AMBIGUOUS; a member that does not handle
// the channel is skipped before the request is sent; with no member that
// handles it, the request is NO_HANDLER naming the group.
func TestServiceGroupRules(t *testing.T) {
	testbus.EachTopology(t, testOpts(), func(t *testing.T, p testbus.Placement) {
		var got sync.Map
		worker(t, p, 0, "w1", "pool", &got)
		lone := worker(t, p, 1, "w2", "", &got)
		caller := connect(t, p.At(2), "caller")
		ctx := ctxT(t, testbus.Settle)
		ch := caller.Scope("c").Channel("work")
		p.Settled(t, "the bare name ambiguous", func() error {
			_, err := ch.Request(ctx, "echoer", nil)
			var re *client.RequestError
			if !errors.Is(err, client.ErrAmbiguous) || !errors.As(err, &re) || !strings.Contains(re.Text, "give them one group") {
				return fmt.Errorf("one grouped, one not: %v", err)
			}
			return nil
		})
		// w2 joins the group by announcing again: the collision is over.
		if info, err := lone.Announce(ctx, wire.Announcement{Service: "echoer", Group: "pool", Channels: []string{"work"}}); err != nil {
			t.Fatal(err)
		} else if p.Bus == nil && info.Collision {
			t.Fatalf("w2 in the group is still a collision: %+v", info)
		}
		awaitMembers(t, p, caller, 2)

		// A third member announces the group but handles another channel:
		// requests on "work" never go to it.
		idle := connect(t, p.At(0), "w3")
		if _, err := idle.Scope("s").Channel("other").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := idle.Announce(ctx, wire.Announcement{Service: "echoer", Group: "pool", Channels: []string{"other"}}); err != nil {
			t.Fatal(err)
		}
		awaitMembers(t, p, caller, 3)
		p.Sees(t, "w1", "w2", "w3")
		for range 30 {
			m, err := ch.Request(ctx, "echoer", nil)
			if err != nil || string(m.Payload()) == "w3" {
				t.Fatalf("request: %v from %q", err, m.Payload())
			}
		}
		_, err := caller.Scope("c").Channel("nowhere").Request(ctx, "echoer", nil)
		var re *client.RequestError
		if !errors.As(err, &re) || re.Kind != wire.ResultNoHandler || !strings.Contains(re.Text, "no member of group pool") {
			t.Fatalf("a channel no member handles: %v", err)
		}
	})
}

// TestServiceGroupMemberLostFailsOnlyItsRequests: a member that takes
// requests and never answers, then disconnects, fails exactly the
// requests it held (DISCONNECT: never sent again to another member);
// every other request of the run is answered by the others.
func TestServiceGroupMemberLostFailsOnlyItsRequests(t *testing.T) {
	testbus.EachTopology(t, testOpts(), func(t *testing.T, p testbus.Placement) {
		var got sync.Map
		// Each request w1 gets enters its handler (64 workers); its
		// connection can be cut as by a crash.
		stuck, conn := testclient.ConnectDroppable(t, p.At(0), "w1", func(o *client.Options) { o.Workers = 64 })
		ctx := ctxT(t, testbus.Settle)
		var held sync.WaitGroup
		var holding atomic.Int64
		release := make(chan struct{})
		defer close(release)
		if _, err := stuck.Scope("s").Channel("work").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
			holding.Add(1)
			<-release
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := stuck.Announce(ctx, wire.Announcement{Service: "echoer", Group: "pool", Channels: []string{"work"}}); err != nil {
			t.Fatal(err)
		}
		worker(t, p, 1, "w2", "pool", &got)
		worker(t, p, 2, "w3", "pool", &got)
		caller := connect(t, p.At(3), "caller")
		awaitMembers(t, p, caller, 3)
		p.Sees(t, "w1", "w2", "w3")
		ch := caller.Scope("c").Channel("work")
		const requests = 30
		var answered, disconnected, other atomic.Int64
		for range requests {
			held.Add(1)
			go func() {
				defer held.Done()
				_, err := ch.Request(ctx, "echoer", nil)
				switch {
				case err == nil:
					answered.Add(1)
				case errors.Is(err, client.ErrDisconnect):
					disconnected.Add(1)
				default:
					other.Add(1)
					t.Errorf("request: %v", err)
				}
			}()
		}
		testbroker.Eventually(t, testbus.Settle, "every request answered or held by w1", func() bool {
			return answered.Load()+holding.Load() == requests
		})
		if holding.Load() == 0 {
			t.Fatal("w1 was given no request")
		}
		conn.Drop()
		held.Wait()
		if h := holding.Load(); disconnected.Load() != h || answered.Load() != requests-h || other.Load() != 0 {
			t.Fatalf("w1 held %d; %d answered, %d DISCONNECT, %d other", h, answered.Load(), disconnected.Load(), other.Load())
		}
	})
}
