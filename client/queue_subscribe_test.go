package client_test

// Queue subscriptions (docs/messaging.md#queue-subscriptions).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
	"busbar/wire"
)

// counter counts what a subscriber got, by payload.
type counter struct {
	mu  sync.Mutex
	got map[string]int
	n   int
}

func (c *counter) handler(_ context.Context, m *client.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string]int{}
	}
	c.got[string(m.Payload())]++
	c.n++
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestQueueMembersShareEventsAndStreams: three members of one queue get
// each of 300 publications and 300 stream messages once in all (100
// each), a subscriber outside the queue gets every one, and each
// publication's results say ACCEPTED for one member and NO_SUBSCRIBER for
// the others.
func TestQueueMembersShareEventsAndStreams(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	ctx := ctxT(t, 30*time.Second)
	members := make([]*counter, 3)
	for i := range members {
		members[i] = &counter{}
		c := connect(t, e, fmt.Sprintf("m%d", i+1))
		if _, err := c.Scope("s").Channel("news").QueueSubscribe(ctx, "workers", members[i].handler); err != nil {
			t.Fatal(err)
		}
	}
	var plain counter
	if _, err := connect(t, e, "plain").Scope("s").Channel("news").Subscribe(ctx, plain.handler); err != nil {
		t.Fatal(err)
	}
	pub := connect(t, e, "pub").Scope("s").Channel("news")
	const n = 300
	for i := range n {
		res, err := pub.Publish(ctx, []byte(fmt.Sprint("e", i)))
		if err != nil {
			t.Fatal(err)
		}
		accepted := map[string]bool{}
		for _, r := range res.Results {
			if r.Result == wire.Accepted {
				accepted[r.Node] = true
			} else if strings.HasPrefix(r.Node, "m") && r.Result != wire.NoSubscriber {
				t.Fatalf("publication %d: %s %s", i, r.Node, r.Result)
			}
		}
		members := 0
		for node := range accepted {
			if strings.HasPrefix(node, "m") {
				members++
			}
		}
		if members != 1 || !accepted["plain"] {
			t.Fatalf("publication %d accepted by %v, want one member and plain", i, accepted)
		}
	}
	for i := range n {
		if err := pub.Emit(ctx, []byte(fmt.Sprint("s", i))); err != nil {
			t.Fatal(err)
		}
	}
	testbroker.Eventually(t, 20*time.Second, "every message delivered", func() bool {
		total := 0
		for _, m := range members {
			total += m.count()
		}
		return total == 2*n && plain.count() == 2*n
	})
	seen := map[string]int{}
	for i, m := range members {
		if got := m.count(); got != 2*n/3 {
			t.Errorf("member %d got %d of %d", i+1, got, 2*n)
		}
		m.mu.Lock()
		for p, k := range m.got {
			seen[p] += k
		}
		m.mu.Unlock()
	}
	if len(seen) != 2*n {
		t.Fatalf("members got %d distinct messages of %d", len(seen), 2*n)
	}
	for p, k := range seen {
		if k != 1 {
			t.Fatalf("%s delivered %d times to the queue", p, k)
		}
	}
}

// TestQueueSubscriptionRules: a node's subscriptions of one channel all
// belong to one queue, or none; a queue name must be a label; a node's
// plain subscription of the channel takes every message whatever its
// queue membership elsewhere.
func TestQueueSubscriptionRules(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	ctx := ctxT(t, 10*time.Second)
	c := connect(t, e, "node")
	ch := c.Scope("s").Channel("news")
	if _, err := ch.QueueSubscribe(ctx, "Not A Label", func(context.Context, *client.Message) {}); err == nil {
		t.Fatal("a queue name that is no label was taken")
	}
	if _, err := ch.QueueSubscribe(ctx, "q", func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Subscribe(ctx, func(context.Context, *client.Message) {}); err == nil || !strings.Contains(err.Error(), "in queue q already") {
		t.Fatalf("a plain subscription beside a queue's: %v", err)
	}
	if _, err := ch.QueueSubscribe(ctx, "other", func(context.Context, *client.Message) {}); err == nil {
		t.Fatal("a second queue on one channel was taken")
	}
	// The directory shows the membership.
	nodes, err := c.Directory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Node == "node" && n.Queues["news"] != "q" {
			t.Fatalf("directory: %+v", n)
		}
	}
	// A member with a plain pattern subscription too gets every event,
	// and is the queue's choice for it: the queue's other member gets
	// none. Its client gives each event to both its subscriptions.
	both := connect(t, e, "both")
	var pattern, member counter
	if _, err := both.Scope("s").Channel("news").QueueSubscribe(ctx, "q", member.handler); err != nil {
		t.Fatal(err)
	}
	if _, err := both.Scope("s").Channel("n*").Subscribe(ctx, pattern.handler); err == nil {
		t.Fatal("n* is no pattern") // the grammar's patterns are whole tokens
	}
	if _, err := both.Scope("s").Channel(">").Subscribe(ctx, pattern.handler); err != nil {
		t.Fatal(err)
	}
	pub := connect(t, e, "pub").Scope("s").Channel("news")
	for range 4 {
		res, err := pub.Publish(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Results {
			if r.Node == "both" && r.Result != wire.Accepted || r.Node == "node" && r.Result != wire.NoSubscriber {
				t.Fatalf("%s: %s", r.Node, r.Result)
			}
		}
	}
	testbroker.Eventually(t, 10*time.Second, "both's events", func() bool { return pattern.count() == 4 && member.count() == 4 })
}

// TestQueueSubscriptionOnABusIsRefused: the choice across brokers is not
// built, so a bus refuses a queue subscription with the reason.
func TestQueueSubscriptionOnABusIsRefused(t *testing.T) {
	u := testbus.Start(t, testOpts())
	c := connect(t, u.Brokers[0], "node")
	_, err := c.Scope("s").Channel("news").QueueSubscribe(ctxT(t, 10*time.Second), "q", func(context.Context, *client.Message) {})
	var re *client.RequestError
	if !errors.As(err, &re) || re.Kind != wire.ResultRejected || !strings.Contains(re.Text, "not built for a bus") {
		t.Fatalf("a queue subscription on a bus: %v", err)
	}
}
