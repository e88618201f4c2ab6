package broker_test

// The contract tests' topologies (internal/testbus, shared with the
// client's tests): the same test body runs with every node on one broker,
// and with each node on a broker of its own on a bus of three brokers
// joined through a three-server NATS cluster (docs/cluster.md). A body
// places node i with at(i) and, before it addresses a node, waits until
// every broker knows it (sees). The bus's brokers share one principals
// store, as brokers sharing a principals file do.

import (
	"testing"

	"busbar/auth"
	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
	"busbar/internal/testnats"
)

const (
	busHeartbeat = testbus.Heartbeat
	busLease     = testbus.Lease
	busSettle    = testbus.Settle
)

// bus is brokers b1, b2, …, broker i connected to NATS server i.
type bus struct {
	nats    *testnats.Cluster
	brokers []*testbroker.Env
}

func startBus(t *testing.T) *bus { return startBusWith(t, testOpts()) }

// startBusWith is startBus with opts for every broker.
func startBusWith(t *testing.T, opts broker.Options) *bus {
	u := testbus.Start(t, opts)
	return &bus{nats: u.NATS, brokers: u.Brokers}
}

func (u *bus) startBroker(t *testing.T, i int, urls ...string) *testbroker.Env {
	return u.startBrokerWith(t, testOpts(), i, urls...)
}

// startBrokerWith starts broker b<i+1> on urls, sharing the principals
// of u's first broker.
func (u *bus) startBrokerWith(t *testing.T, opts broker.Options, i int, urls ...string) *testbroker.Env {
	t.Helper()
	return (&testbus.Bus{NATS: u.nats, Brokers: u.brokers}).StartBroker(t, opts, i, urls...)
}

type placement struct {
	// at is the broker of the test's i-th node (0, 1, 2 …).
	at func(i int) *testbroker.Env
	// sees waits until every broker lists each node, with the
	// subscriptions given as "node:channel".
	sees func(t *testing.T, nodes ...string)
	// settled checks what a node reads of another's change: once on one
	// broker, until it holds on a bus (testbus.Placement.Settled).
	settled func(t *testing.T, what string, check func() error)
	// brokers are the brokers in play.
	brokers []*testbroker.Env
}

// eachTopology runs body on one broker and on a bus of three, with opts
// (a bus adds names and its cluster options) and the extra principals.
func eachTopology(t *testing.T, opts broker.Options, body func(t *testing.T, p placement), extra ...auth.Principal) {
	testbus.EachTopology(t, opts, func(t *testing.T, p testbus.Placement) {
		body(t, placement{at: p.At, sees: p.Sees, settled: p.Settled, brokers: p.Brokers})
	}, extra...)
}

var awaitKnown = testbus.AwaitKnown
