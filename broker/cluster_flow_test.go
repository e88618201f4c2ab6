package broker_test

// Flow control between brokers (docs/cluster.md#flow-control): a stream
// across brokers at full speed is paced by the receiving broker's credit
// instead of overflowing its NATS client; a frozen subscriber there costs
// the others nothing; and what NATS still drops is counted.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/wire"
)

// flowBus is two brokers on a three-server NATS cluster whose max_payload
// is maxPayload; tune adjusts broker i's cluster options.
func flowBus(t *testing.T, maxPayload int32, tune func(i int, o *broker.Options)) *bus {
	t.Helper()
	nc := testnats.Start(t, 3, func(o *server.Options) { o.MaxPayload = maxPayload })
	u := &bus{nats: nc}
	for i := range 2 {
		opts := testOpts()
		opts.Name = fmt.Sprintf("b%d", i+1)
		opts.Cluster = broker.ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: busHeartbeat, Lease: busLease}
		tune(i, &opts)
		u.brokers = append(u.brokers, testbroker.Start(t, "tcp", opts))
	}
	return u
}

// counter is a subscription handler that counts.
type counter struct{ n atomic.Int64 }

func (c *counter) handle(context.Context, *client.Message) { c.n.Add(1) }

func subscribe(t *testing.T, c *client.Client, channel string, h func(context.Context, *client.Message)) {
	t.Helper()
	if _, err := c.Scope("s").Channel(channel).Subscribe(ctxT(t, 5*time.Second), h); err != nil {
		t.Fatal(err)
	}
}

// emit sends n stream messages of size bytes on channel as fast as c
// can, and returns how long it took.
func emit(t *testing.T, c *client.Client, channel string, n, size int) time.Duration {
	t.Helper()
	ch := c.Scope("s").Channel(channel)
	payload := make([]byte, size)
	start := time.Now()
	for range n {
		if err := ch.Emit(ctxT(t, 30*time.Second), payload); err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start)
}

// streamDrops sums what the brokers counted as stream messages dropped or
// expired, and frames their links lost.
func streamDrops(u *bus) (dropped, lost int64) {
	for _, e := range u.brokers {
		s := e.Broker.Stats()
		dropped += s.Dropped + s.ExpiredInQueue
		lost += s.Drops[broker.DropLinkLost]
	}
	return dropped, lost
}

// TestBusStreamAtFullSpeedLosesNothing: a publisher on b1 emitting as
// fast as it can to a subscriber on b2 is paced by b2's credit: every
// message arrives, nothing is counted lost anywhere, though b2's NATS
// client keeps no more than its pending limit set exactly at the bound
// credit guarantees (LinkWindow + 2 × max_payload) — at the edge.
func TestBusStreamAtFullSpeedLosesNothing(t *testing.T) {
	const maxPayload, window = 64 << 10, broker.DefaultClusterLinkWindow
	u := flowBus(t, maxPayload, func(_ int, o *broker.Options) {
		o.Cluster.LinkWindow = window
		o.Cluster.LinkPendingBytes = window + 2*maxPayload
	})
	alpha := connect(t, u.brokers[0], "alpha")
	beta := connect(t, u.brokers[1], "beta", bigDispatch)
	var got counter
	subscribe(t, beta, "ticks", got.handle)
	awaitKnown(t, u.brokers[:1], "beta:ticks")
	const n = 60000
	took := emit(t, alpha, "ticks", n, 128)
	testbroker.Await(t, 60*time.Second, "every message delivered", func() error {
		if g := got.n.Load(); g != n {
			d, l := streamDrops(u)
			return fmt.Errorf("beta got %d of %d; the brokers dropped %d (b1 %v, b2 %v), their links lost %d, beta's client %d", g, n, d, u.brokers[0].Broker.Stats().Drops, u.brokers[1].Broker.Stats().Drops, l, beta.Dropped())
		}
		return nil
	})
	if d, l := streamDrops(u); d != 0 || l != 0 || beta.Dropped() != 0 {
		t.Fatalf("dropped %d, lost %d on links, %d by the client", d, l, beta.Dropped())
	}
	t.Logf("%d messages in %v: %.0f msgs/s; b1 stalled its publisher %d times", n, took, float64(n)/took.Seconds(), u.brokers[0].Broker.Stats().StreamStalls)
}

// TestBusFrozenSubscriberLeavesTheOthersAlone: a subscriber on b2 that
// stops reading loses its messages (counted on b2) while the publisher on
// b1 goes on and a healthy subscriber of the same stream on b2 keeps
// receiving what is published after that. As on one broker
// (TestStreamStuckSubscriberDoesNotStallPublisher), how many the healthy
// one gets and how long publishing took are figures, logged: streams are
// best effort, and a busy machine slows either.
func TestBusFrozenSubscriberLeavesTheOthersAlone(t *testing.T) {
	u := flowBus(t, 1<<20, func(i int, o *broker.Options) { o.MaxQueueBytes = 1 << 20 })
	b2 := u.brokers[1]
	r := b2.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "frozen", "local", b2.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte("flow")))
	r.Read(t) // subscribed; it reads nothing more
	healthy := connect(t, b2, "healthy", func(o *client.Options) { o.DispatchQueue = 1 << 15 })
	var got counter
	var marked atomic.Bool
	subscribe(t, healthy, "flow", func(ctx context.Context, m *client.Message) {
		got.handle(ctx, m)
		marked.CompareAndSwap(false, isMarker(m))
	})
	awaitKnown(t, u.brokers[:1], "frozen:flow", "healthy:flow")
	const n = 20000
	producer := connect(t, u.brokers[0], "producer")
	took := emit(t, producer, "flow", n, 1024)
	testbroker.Eventually(t, time.Minute, "drops on b2 for the frozen subscriber", func() bool {
		s := b2.Broker.Stats()
		return s.Drops[broker.DropQueueFull]+s.Drops[broker.DropStuckReader] > 0
	})
	awaitMarker(t, producer.Scope("s").Channel("flow"), &marked)
	s := b2.Broker.Stats()
	t.Logf("healthy got %d of %d; published in %v; b2 dropped %v (by reason) for the frozen one, b1 %v", got.n.Load(), n, took, s.Drops, u.brokers[0].Broker.Stats().Drops)
}

// TestBusFramesNATSDropsAreCounted: with b2's pending limit far below
// what b1 may send it, b2's NATS client drops batches (a slow consumer),
// and every message is accounted for: delivered, or counted as lost on
// the link (link_lost) or dropped by a broker. The gap of a batch lost
// last is shown by the next message: markers sent one at a time, each a
// message small enough to pass, until the last one sent arrives (markers
// that were still in flight when an earlier one arrived may be lost with
// nothing after them to show it).
// drainDeadline bounds how long a flow test waits for a stream to drain
// through the brokers: far past a drain on a quiet machine (a second or
// two), since it only bounds a failure.
const drainDeadline = 3 * time.Minute

func TestBusFramesNATSDropsAreCounted(t *testing.T) {
	u := flowBus(t, 1<<20, func(i int, o *broker.Options) {
		if i == 1 {
			o.Cluster.LinkPendingBytes = 4 << 10
		}
	})
	alpha := connect(t, u.brokers[0], "alpha")
	beta := connect(t, u.brokers[1], "beta", bigDispatch)
	var ticks, ends counter
	var lastEnd atomic.Int64 // the number of the last marker that arrived
	subscribe(t, beta, "ticks", ticks.handle)
	subscribe(t, beta, "end", func(ctx context.Context, m *client.Message) {
		ends.handle(ctx, m)
		if k, err := strconv.ParseInt(string(m.Payload()), 10, 64); err == nil {
			lastEnd.Store(k)
		}
	})
	awaitKnown(t, u.brokers[:1], "beta:ticks", "beta:end")
	const n = 20000
	emit(t, alpha, "ticks", n, 256)
	sent := 0
	end := alpha.Scope("s").Channel("end")
	// The markers queue behind the stream at alpha's broker: on a busy
	// machine under -race, passing 20,000 frames to NATS takes a while.
	testbroker.Await(t, drainDeadline, "the last marker after the stream", func() error {
		if sent > 0 && lastEnd.Load() == int64(sent) {
			return nil
		}
		sent++
		if err := end.Emit(ctxT(t, 5*time.Second), []byte(strconv.Itoa(sent))); err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("marker %d sent, the last to arrive is %d", sent, lastEnd.Load())
	})
	testbroker.Await(t, drainDeadline, "every message accounted for", func() error {
		d, l := streamDrops(u)
		if got, want := ticks.n.Load()+ends.n.Load()+d+l+beta.Dropped(), int64(n+sent); got != want {
			return fmt.Errorf("delivered %d+%d, dropped %d, lost on the link %d, by the client %d: %d of %d", ticks.n.Load(), ends.n.Load(), d, l, beta.Dropped(), got, want)
		}
		return nil
	})
	if _, l := streamDrops(u); l == 0 {
		t.Fatal("NATS dropped nothing: the pending limit was not reached")
	}
	d, l := streamDrops(u)
	t.Logf("of %d ticks and %d markers: %d and %d delivered, %d lost between the brokers, %d dropped by them", n, sent, ticks.n.Load(), ends.n.Load(), l, d)
}

// TestClusterLinkLimitsAreChecked: LinkWindow is at least
// MinClusterLinkWindow and LinkPendingBytes at least one smallest link
// message, 32 bytes; both edges are taken.
func TestClusterLinkLimitsAreChecked(t *testing.T) {
	nc := testnats.Start(t, 1)
	for _, tc := range []struct {
		name            string
		window, pending int
		want            string
	}{
		{"window below the least", broker.MinClusterLinkWindow - 1, 0, "below the least window"},
		{"pending below a message", 0, 31, "below 32 bytes"},
		{"window at the least", broker.MinClusterLinkWindow, 0, ""},
		{"pending of one message", 0, 32, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := broker.New(broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: nc.URLs(), LinkWindow: tc.window, LinkPendingBytes: tc.pending}})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("New: %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
