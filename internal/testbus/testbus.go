// Package testbus runs the contract tests on both topologies
// (docs/cluster.md): the same test body with every node on one broker,
// and with each node on a broker of its own on a bus of three brokers
// joined through a three-server NATS cluster in the test process. The
// broker's and the client's tests share it, so one body checks a promise
// wherever the nodes are; only tests import it.
//
// A body places its i-th node with Placement.At(i) and, before it
// addresses a node on another broker, waits with Placement.Sees until
// every broker knows it: the directory is shared asynchronously, within
// a snapshot's gap.
package testbus

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
)

// Short leases keep the fault tests quick; the bound they check is the
// documented one, Lease + Heartbeat. The lease is still 20 heartbeats:
// under -race on 2 loaded cores a broker's heartbeat can come late, and a
// shorter lease dropped a live broker's nodes mid-test.
const (
	Heartbeat = 100 * time.Millisecond
	Lease     = 2 * time.Second
	// Settle is what a test waits for the bus to converge: far more than
	// it takes, so a loaded machine does not fail it (under -race at a
	// load average of 18, 256 nodes took over 10 s to reach every
	// broker). Only a failing test waits it out.
	Settle = 30 * time.Second
)

// Bus is brokers b1, b2, b3, broker i on NATS server i, sharing one
// principals store (Env.Secrets holds on every broker).
type Bus struct {
	NATS    *testnats.Cluster
	Brokers []*testbroker.Env
}

// Start runs a three-server NATS cluster and three brokers on it over
// TCP, each with opts (names and cluster options added) and the extra
// principals (testbroker.Start).
func Start(t *testing.T, opts broker.Options, extra ...auth.Principal) *Bus {
	t.Helper()
	u := &Bus{NATS: testnats.Start(t, 3)}
	u.Brokers = append(u.Brokers, u.startBroker(t, opts, 0, extra, u.NATS.URL(0)))
	for i := 1; i < 3; i++ {
		u.Brokers = append(u.Brokers, u.StartBroker(t, opts, i, u.NATS.URL(i)))
	}
	return u
}

// StartBroker runs broker b<i+1> with opts on the NATS servers urls,
// sharing the principals of the bus's first broker (if it has one yet):
// a broker added to the bus, or one started again.
func (u *Bus) StartBroker(t *testing.T, opts broker.Options, i int, urls ...string) *testbroker.Env {
	t.Helper()
	return u.startBroker(t, opts, i, nil, urls...)
}

func (u *Bus) startBroker(t *testing.T, opts broker.Options, i int, extra []auth.Principal, urls ...string) *testbroker.Env {
	t.Helper()
	opts.Name = fmt.Sprintf("b%d", i+1)
	opts.Cluster.URLs, opts.Cluster.Heartbeat, opts.Cluster.Lease = urls, Heartbeat, Lease
	if len(u.Brokers) > 0 {
		return testbroker.StartSharing(t, "tcp", opts, u.Brokers[0])
	}
	return testbroker.Start(t, "tcp", opts, extra...)
}

// Placement is where a test body's nodes go.
type Placement struct {
	// At is the broker of the test's i-th node (0, 1, 2 …).
	At func(i int) *testbroker.Env
	// Sees waits until every broker lists each node, with the
	// subscriptions given as "node:channel".
	Sees func(t *testing.T, nodes ...string)
	// Settled checks what a node reads of another's change: on one broker
	// once, as the change is there when its call returns; on a bus until
	// it holds or Settle passes, as the change reaches the other brokers
	// asynchronously. what names the expectation in a failure.
	Settled func(t *testing.T, what string, check func() error)
	// Brokers are the brokers in play.
	Brokers []*testbroker.Env
	// Bus is the bus, or nil on one broker.
	Bus *Bus
}

// One is every node on broker e.
func One(e *testbroker.Env) Placement {
	return Placement{
		At:   func(int) *testbroker.Env { return e },
		Sees: func(*testing.T, ...string) {},
		Settled: func(t *testing.T, what string, check func() error) {
			t.Helper()
			if err := check(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		},
		Brokers: []*testbroker.Env{e},
	}
}

// Spread is node i on broker i mod 3 of u.
func Spread(u *Bus) Placement {
	return Placement{
		At:   func(i int) *testbroker.Env { return u.Brokers[i%len(u.Brokers)] },
		Sees: func(t *testing.T, nodes ...string) { t.Helper(); AwaitKnown(t, u.Brokers, nodes...) },
		Settled: func(t *testing.T, what string, check func() error) {
			t.Helper()
			testbroker.Await(t, Settle, what, check)
		},
		Brokers: u.Brokers,
		Bus:     u,
	}
}

// Key is the bus key of the contract tests' buses.
var Key = []byte("contract tests' bus key, 32 bytes or more")

// Sealed is opts for a bus whose brokers share Key and seal every
// message with it: the contract tests run their bus through the whole
// envelope (docs/cluster.md#bus-key); the other bus tests, without one.
func Sealed(opts broker.Options) broker.Options {
	opts.Cluster.BusKey, opts.Cluster.SealPayloads = Key, true
	return opts
}

// EachTopology runs body as subtests "one-broker" (a broker with opts on
// TCP) and "bus" (Start's three with a sealed bus key, node i on broker
// i mod 3), each with the extra principals.
func EachTopology(t *testing.T, opts broker.Options, body func(t *testing.T, p Placement), extra ...auth.Principal) {
	t.Run("one-broker", func(t *testing.T) { body(t, One(testbroker.Start(t, "tcp", opts, extra...))) })
	t.Run("bus", func(t *testing.T) { body(t, Spread(Start(t, Sealed(opts), extra...))) })
}

// EachTransportAndTopology runs body on one broker with opts over every
// transport (testbroker.Transports), then on the bus (with a sealed bus
// key): a contract test
// that runs over every transport runs on the bus too, in one matrix.
func EachTransportAndTopology(t *testing.T, opts broker.Options, body func(t *testing.T, p Placement)) {
	for _, scheme := range testbroker.Transports {
		t.Run(scheme, func(t *testing.T) { body(t, One(testbroker.Start(t, scheme, opts))) })
	}
	t.Run("bus", func(t *testing.T) { body(t, Spread(Start(t, Sealed(opts)))) })
}

// AwaitKnown waits until every broker lists each node ("node" or
// "node:channel", a node with a subscriber of channel).
func AwaitKnown(t *testing.T, envs []*testbroker.Env, nodes ...string) {
	t.Helper()
	for _, e := range envs {
		testbroker.Await(t, Settle, e.Broker.Name()+" to know "+fmt.Sprint(nodes), func() error {
			dir := e.Broker.Directory()
		next:
			for _, want := range nodes {
				node, channel, sub := strings.Cut(want, ":")
				for _, n := range dir {
					if n.Node == node && (!sub || slices.Contains(n.Subscriptions, channel)) {
						continue next
					}
				}
				return fmt.Errorf("%s does not list %s", e.Broker.Name(), want)
			}
			return nil
		})
	}
}
