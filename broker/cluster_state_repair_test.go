package broker

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"busbar/internal/testnats"
	"busbar/wire"
)

// TestBusStateRepairsALostWriteByDigest: a state write one broker never
// received (its subscription was gone while the write crossed, as when
// NATS drops a message) reaches it through the digests, with no broker
// joining, leaving or reconnecting: the writer's broker sees the other's
// digest differ and republishes the namespace. With more namespaces than
// one NATS message holds, the digest goes in pages and still finds it.
func TestBusStateRepairsALostWriteByDigest(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxPayload int32 // 0: NATS's default
		namespaces int
		paged      bool
	}{
		{"one digest", 0, 1, false},
		{"a digest in pages", 4 << 10, 150, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := testnats.Start(t, 3, func(o *server.Options) {
				if tc.maxPayload > 0 {
					o.MaxPayload = tc.maxPayload
				}
			})
			b1, b2, writers := repairPair(t, nc, (tc.namespaces+MaxNamespacesPerNode-1)/MaxNamespacesPerNode)
			var pages atomic.Int64 // digests of b1 that were not whole
			watch, err := nats.Connect(nc.URL(2))
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close()
			if _, err := watch.Subscribe("busbar.state.b1", func(m *nats.Msg) {
				var sm stateMsg
				if json.Unmarshal(m.Data, &sm) == nil && sm.NS == "" && !sm.Whole {
					pages.Add(1)
				}
			}); err != nil {
				t.Fatal(err)
			}
			if err := watch.Flush(); err != nil { // subscribed before b1's first digest
				t.Fatal(err)
			}
			// probe hears b1's state on b2's NATS server: once it has the
			// lost write, so has that server, and b2's new subscription
			// cannot catch the write still crossing the route.
			var sawBefore, sawLost atomic.Bool
			last := fmt.Sprint("ns-", tc.namespaces-1)
			probe, err := nats.Connect(nc.URL(1))
			if err != nil {
				t.Fatal(err)
			}
			defer probe.Close()
			if _, err := probe.Subscribe("busbar.state.b1", func(m *nats.Msg) {
				var sm stateMsg
				if json.Unmarshal(m.Data, &sm) == nil && sm.NS == last {
					for _, e := range sm.Entries {
						sawBefore.CompareAndSwap(false, e.Key == "before")
						sawLost.CompareAndSwap(false, e.Key == "lost")
					}
				}
			}); err != nil {
				t.Fatal(err)
			}
			if err := probe.Flush(); err != nil {
				t.Fatal(err)
			}
			for i := range tc.namespaces {
				setState(t, writers[i/MaxNamespacesPerNode], fmt.Sprint("ns-", i), "before", 1)
			}
			pollUntil(t, 10*time.Second, "b2 has the first writes", func() bool { return hasKey(b2, last, "before") })
			pollUntil(t, 10*time.Second, "the probe has the first writes", sawBefore.Load)

			// b2 stops hearing state while one more write crosses.
			i := -1
			for j, s := range b2.cl.subs {
				if strings.HasPrefix(s.Subject, b2.cl.subj.state) {
					i = j
				}
			}
			if err := b2.cl.subs[i].Unsubscribe(); err != nil {
				t.Fatal(err)
			}
			if err := b2.cl.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			setState(t, writers[len(writers)-1], last, "lost", 2)
			pollUntil(t, 10*time.Second, "b2's server has the lost write", sawLost.Load)
			sub, err := b2.cl.nc.Subscribe(b2.cl.subj.state+"*", b2.cl.onState)
			if err != nil {
				t.Fatal(err)
			}
			b2.cl.subs[i] = sub
			pollUntil(t, 10*time.Second, "b2 has the lost write", func() bool { return hasKey(b2, last, "lost") })
			if n := b1.Stats().StateRepairs; n < 1 {
				t.Fatalf("b1 republished %d namespaces on a digest", n)
			}
			// The watch hears b1 on a third server, which b2's repair does
			// not wait for: wait for a page there rather than expect one.
			if tc.paged {
				pollUntil(t, 10*time.Second, "a digest of b1's in pages", func() bool { return pages.Load() > 0 })
			} else if pages.Load() > 0 {
				t.Fatalf("%d digests in pages, want whole ones", pages.Load())
			}
		})
	}
}

// repairPair is brokers b1 and b2 on NATS servers 0 and 1, and writers
// nodes on b1.
func repairPair(t *testing.T, nc *testnats.Cluster, writers int) (*Broker, *Broker, []*rawNode) {
	t.Helper()
	start := func(i int) (*Broker, string) {
		b, secret := newTestBroker(t, Options{Name: fmt.Sprintf("b%d", i+1),
			Cluster: ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: 100 * time.Millisecond, Lease: 500 * time.Millisecond}})
		t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
		return b, secret
	}
	b1, secret := start(0)
	b2, _ := start(1)
	pollUntil(t, 10*time.Second, "the brokers know each other", func() bool { return b1.cl.isPeer("b2") && b2.cl.isPeer("b1") })
	var ws []*rawNode
	for i := range writers {
		ws = append(ws, join(t, b1, secret, fmt.Sprint("writer", i)))
	}
	return b1, b2, ws
}

// setState writes key of ns through n at version ver.
func setState(t *testing.T, n *rawNode, ns, key string, ver int) {
	t.Helper()
	body := json.RawMessage(fmt.Sprintf(`{"ns":%q,"key":%q,"value":1,"ver":%d}`, ns, key, ver))
	if m := n.ask(t, wire.CmdStateSet, ns+"/"+key, body); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("set %s/%s: %v", ns, key, m)
	}
}

// hasKey reports whether b holds key in ns.
func hasKey(b *Broker, ns, key string) bool {
	reps, _ := b.state.replicas()
	for _, r := range reps {
		for _, e := range r.snap.Entries {
			if r.snap.NS == ns && e.Key == key {
				return true
			}
		}
	}
	return false
}

// pollUntil polls cond until it holds, failing the test after timeout.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}
