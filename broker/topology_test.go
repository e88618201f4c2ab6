package broker_test

// The contract tests' topologies: the same test body runs with every node
// on one broker, and with each node on a broker of its own on a bus of
// three brokers joined through a three-server NATS cluster
// (docs/cluster.md). A body places node i with at(i) and, before it
// addresses a node, waits until every broker knows it (sees).

import (
	"fmt"
	"slices"
	"testing"

	"busbar/broker"
	"busbar/internal/testbroker"
)

type placement struct {
	// at is the broker of the test's i-th node (0, 1, 2 …).
	at func(i int) *testbroker.Env
	// sees waits until every broker lists each node, with the
	// subscriptions given as "node:channel".
	sees func(t *testing.T, nodes ...string)
	// brokers are the brokers in play.
	brokers []*testbroker.Env
}

// eachTopology runs body on one broker and on a bus of three, with opts
// (a bus adds names and its cluster options).
func eachTopology(t *testing.T, opts broker.Options, body func(t *testing.T, p placement)) {
	t.Run("one-broker", func(t *testing.T) {
		e := testbroker.Start(t, "tcp", opts)
		body(t, placement{at: func(int) *testbroker.Env { return e }, sees: func(*testing.T, ...string) {}, brokers: []*testbroker.Env{e}})
	})
	t.Run("bus", func(t *testing.T) {
		u := startBusWith(t, opts)
		body(t, placement{
			at:      func(i int) *testbroker.Env { return u.brokers[i%len(u.brokers)] },
			sees:    func(t *testing.T, nodes ...string) { awaitKnown(t, u.brokers, nodes...) },
			brokers: u.brokers,
		})
	})
}

// awaitKnown waits until every broker lists each node ("node" or
// "node:channel", a node with a subscriber of channel).
func awaitKnown(t *testing.T, envs []*testbroker.Env, nodes ...string) {
	t.Helper()
	for _, e := range envs {
		testbroker.Await(t, busSettle, e.Broker.Name()+" to know "+fmt.Sprint(nodes), func() error {
			dir := e.Broker.Directory()
		next:
			for _, want := range nodes {
				node, channel, sub := cut(want)
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

func cut(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
