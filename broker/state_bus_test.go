package broker_test

// Replicated state wherever the nodes are: written on one broker, read
// and watched on another (eachTopology), kept across a broker's restart
// and converging after a partition (docs/cluster.md#replicated-state).

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
)

// awaitValue waits until c reads key of ns as want.
func awaitValue(t *testing.T, c *client.Client, ns, key, want string) {
	t.Helper()
	testbroker.Await(t, busSettle, ns+"/"+key+" = "+want, func() error {
		e, found, err := c.State(ns).Get(ctxT(t, 5*time.Second), key)
		switch {
		case err != nil:
			return err
		case !found || e.Deleted:
			return fmt.Errorf("%s/%s not found", ns, key)
		case string(e.Value) != want:
			return fmt.Errorf("%s/%s = %s", ns, key, e.Value)
		}
		return nil
	})
}

// TestStateWritesReachWatchersOnEveryBroker: a write on any broker
// reaches a watch on any other, in order, and a read there.
func TestStateWritesReachWatchersOnEveryBroker(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		beta := connect(t, p.at(1), "beta")
		ctx := ctxT(t, 10*time.Second)
		w, err := beta.State("home").Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for _, v := range []string{"1", "2"} {
			if _, err := alpha.State("home").Set(ctx, "lamp", v); err != nil {
				t.Fatal(err)
			}
		}
		for _, want := range []string{`"1"`, `"2"`} {
			select {
			case e := <-w.Changes():
				if string(e.Value) != want || e.Source != "alpha" {
					t.Fatalf("the watch on %s saw %s from %s, want %s", p.at(1).Broker.Name(), e.Value, e.Source, want)
				}
			case <-ctx.Done():
				t.Fatalf("the watch on %s saw no %s", p.at(1).Broker.Name(), want)
			}
		}
		awaitValue(t, beta, "home", "lamp", `"2"`)
	})
}

// stateBroker is broker b<i+1> on NATS server i, with its state in path
// ("" in memory).
func stateBroker(t *testing.T, nc *testnats.Cluster, i int, path string) *testbroker.Env {
	opts := testOpts()
	opts.Name = fmt.Sprintf("b%d", i+1)
	opts.StatePath = path
	opts.Cluster = broker.ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: busHeartbeat, Lease: busLease}
	return testbroker.Start(t, "tcp", opts)
}

// TestBusStateSurvivesABrokerRestart: a broker that stops and starts again
// on its store has what it stored before and what was written on the bus
// while it was away.
func TestBusStateSurvivesABrokerRestart(t *testing.T) {
	nc := testnats.Start(t, 3)
	path := filepath.Join(t.TempDir(), "state.db")
	b1, b2 := stateBroker(t, nc, 0, ""), stateBroker(t, nc, 1, path)
	alpha, beta := connect(t, b1, "alpha"), connect(t, b2, "beta")
	ctx := ctxT(t, 20*time.Second)
	if _, err := alpha.State("home").Set(ctx, "before", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := beta.State("garden").Set(ctx, "mine", 2); err != nil {
		t.Fatal(err)
	}
	awaitValue(t, beta, "home", "before", "1")
	if err := b2.Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.State("home").Set(ctx, "while-away", 3); err != nil {
		t.Fatal(err)
	}
	again := connect(t, stateBroker(t, nc, 1, path), "beta")
	awaitValue(t, again, "home", "before", "1")
	awaitValue(t, again, "garden", "mine", "2")
	awaitValue(t, again, "home", "while-away", "3")
	awaitValue(t, alpha, "garden", "mine", "2")
}

// TestBusStateConvergesAfterAPartition: writes made on both sides of a
// cut reach the other side once it heals.
func TestBusStateConvergesAfterAPartition(t *testing.T) {
	u := startBus(t)
	alpha := connect(t, u.brokers[0], "alpha")
	gamma := connect(t, u.brokers[2], "gamma")
	ctx := ctxT(t, 20*time.Second)
	if _, err := alpha.State("home").Set(ctx, "before", 1); err != nil {
		t.Fatal(err)
	}
	awaitValue(t, gamma, "home", "before", "1")
	u.nats.Stop(2) // b3 is cut off
	awaitDirectory(t, u.brokers[:1], map[string]string{"alpha": "b1"})
	if _, err := alpha.State("home").Set(ctx, "during", json.RawMessage(`"b1"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := gamma.State("garden").Set(ctx, "during", json.RawMessage(`"b3"`)); err != nil {
		t.Fatal(err)
	}
	u.nats.Restart(t, 2)
	awaitValue(t, gamma, "home", "during", `"b1"`)
	awaitValue(t, alpha, "garden", "during", `"b3"`)
	awaitValue(t, connect(t, u.brokers[1], "beta"), "garden", "during", `"b3"`)
}
