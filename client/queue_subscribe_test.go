package client_test

// Queue subscriptions (docs/messaging.md#queue-subscriptions).

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/broker"
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

// TestQueueMembersShareAcrossBrokers: three members of one queue on two
// brokers (on one broker: all three there) get each of 300 publications
// and 300 stream messages once in all, a third each within 20%, whether
// the publisher is on a member's broker or on a third; a plain subscriber
// gets every one; each publication's results say ACCEPTED for one member
// and NO_SUBSCRIBER for the others. Once a member leaves, it is chosen no
// more and the other two share everything. On the bus the brokers seal
// their messages, the choice included: nothing on NATS shows it.
func TestQueueMembersShareAcrossBrokers(t *testing.T) {
	testbus.EachTopology(t, testOpts(), func(t *testing.T, p testbus.Placement) {
		ctx := ctxT(t, time.Minute)
		names := []string{"m1", "m2", "m3"}
		members := map[string]*counter{}
		clients := map[string]*client.Client{}
		for i, at := range []int{0, 1, 3} { // b1, b2, b1
			name := names[i]
			members[name] = &counter{}
			clients[name] = connect(t, p.At(at), name)
			if _, err := clients[name].Scope("s").Channel("news").QueueSubscribe(ctx, "workers", members[name].handler); err != nil {
				t.Fatal(err)
			}
		}
		var plain counter
		if _, err := connect(t, p.At(4), "plain").Scope("s").Channel("news").Subscribe(ctx, plain.handler); err != nil {
			t.Fatal(err)
		}
		pubs := []*client.Channel{connect(t, p.At(0), "pub1").Scope("s").Channel("news"), connect(t, p.At(2), "pub3").Scope("s").Channel("news")}
		p.Sees(t, "m1:news", "m2:news", "m3:news", "plain:news", "pub1", "pub3")
		seen := sealedLinks(t, p)

		// publish sends n publications and n stream messages, half from
		// each publisher, and checks each publication's results.
		publish := func(tag string, n int, in []string) {
			t.Helper()
			for i := range n {
				res, err := pubs[i%2].Publish(ctx, []byte(fmt.Sprint(tag, "e", i)))
				if err != nil {
					t.Fatal(err)
				}
				given := 0
				for _, r := range res.Results {
					switch {
					case r.Node == "plain" && r.Result != wire.Accepted:
						t.Fatalf("publication %d: plain %s", i, r.Result)
					case !slices.Contains(in, r.Node):
					case r.Result == wire.Accepted:
						given++
					case r.Result != wire.NoSubscriber:
						t.Fatalf("publication %d: %s %s", i, r.Node, r.Result)
					}
				}
				if given != 1 {
					t.Fatalf("publication %d given to %d members: %+v", i, given, res.Results)
				}
			}
			for i := range n {
				if err := pubs[i%2].Emit(ctx, []byte(fmt.Sprint(tag, "s", i))); err != nil {
					t.Fatal(err)
				}
			}
		}
		// shared checks that the members in got every one of the 2n
		// messages tagged tag once in all, evenly, and the others none.
		shared := func(tag string, n int, in []string) {
			t.Helper()
			testbroker.Eventually(t, testbus.Settle, "every "+tag+" message delivered", func() bool {
				total := 0
				for _, m := range members {
					total += m.tagged(tag)
				}
				return total >= 2*n && plain.tagged(tag) >= 2*n
			})
			once := map[string]int{}
			for name, m := range members {
				got := m.tagged(tag)
				if !slices.Contains(in, name) {
					if got != 0 {
						t.Errorf("%s, not a member, got %d", name, got)
					}
					continue
				}
				if want := 2 * n / len(in); got < want*8/10 || got > want*12/10 {
					t.Errorf("%s got %d of %d", name, got, 2*n)
				}
				m.mu.Lock()
				for p, k := range m.got {
					if strings.HasPrefix(p, tag) {
						once[p] += k
					}
				}
				m.mu.Unlock()
			}
			if len(once) != 2*n {
				t.Fatalf("the queue got %d distinct messages of %d", len(once), 2*n)
			}
			for p, k := range once {
				if k != 1 {
					t.Fatalf("%s delivered %d times to the queue", p, k)
				}
			}
		}
		const n = 300
		publish("a", n, names)
		shared("a", n, names)
		seen()

		// m2 leaves: once every broker knows, it is never chosen.
		clients["m2"].Close()
		testbroker.Await(t, testbus.Settle, "m2 gone", func() error {
			for _, e := range p.Brokers {
				for _, node := range e.Broker.Directory() {
					if node.Node == "m2" {
						return fmt.Errorf("%s still lists m2", e.Broker.Name())
					}
				}
			}
			return nil
		})
		publish("b", 60, []string{"m1", "m3"})
		shared("b", 60, []string{"m1", "m3"})
	})
}

// tagged counts the messages c got whose payload starts with tag.
func (c *counter) tagged(tag string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for p, k := range c.got {
		if strings.HasPrefix(p, tag) {
			n += k
		}
	}
	return n
}

// sealedLinks watches, on a bus, what the brokers send each other on
// NATS; the check it returns fails if any of it showed the queue's choice
// or a frame's headers in the clear, or if nothing was seen. On one broker
// there is nothing to watch.
func sealedLinks(t *testing.T, p testbus.Placement) func() {
	if p.Bus == nil {
		return func() {}
	}
	nc, err := nats.Connect(p.Bus.NATS.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	var msgs int
	var clear []string
	sub, err := nc.Subscribe(broker.DefaultClusterSubjectPrefix+".to.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		msgs++
		for _, s := range []string{wire.HeaderQueueChosen + ": ", wire.HeaderCommand + ": "} {
			if bytes.Contains(m.Data, []byte(s)) {
				clear = append(clear, s)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		_ = sub.Unsubscribe()
		mu.Lock()
		defer mu.Unlock()
		if msgs == 0 || len(clear) > 0 {
			t.Fatalf("of %d messages between brokers, some showed %v in the clear", msgs, clear)
		}
	}
}
