package broker_test

// Replicated state wherever the nodes are: written on one broker, read
// and watched on another (eachTopology), kept across a broker's restart
// and converging after a partition, dropped or given a new owner on every
// broker (docs/cluster.md#replicated-state).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/wire"
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

// homeOnABus starts a bus with alpha on b1 and gamma on b3, writes key of
// namespace home as alpha (value, JSON) and waits until gamma reads it.
func homeOnABus(t *testing.T, key, value string) (*bus, *client.Client, *client.Client, context.Context) {
	t.Helper()
	u := startBus(t)
	alpha := connect(t, u.brokers[0], "alpha")
	gamma := connect(t, u.brokers[2], "gamma")
	ctx := ctxT(t, 30*time.Second)
	if _, err := alpha.State("home").Set(ctx, key, json.RawMessage(value)); err != nil {
		t.Fatal(err)
	}
	awaitValue(t, gamma, "home", key, value)
	return u, alpha, gamma, ctx
}

// TestBusStateConvergesAfterAPartition: writes made on both sides of a
// cut reach the other side once it heals.
func TestBusStateConvergesAfterAPartition(t *testing.T) {
	u, alpha, gamma, ctx := homeOnABus(t, "before", "1")
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

// rawStateWatch is a node on e, speaking the protocol by hand, that
// watches ns: it sees the broker's bus.state.reset itself, which a
// client's watch handles without a trace.
func rawStateWatch(t *testing.T, e *testbroker.Env, node, ns string) *testbroker.Raw {
	t.Helper()
	r := e.DialRaw(t)
	if m := r.Hello(t, wire.ProtocolVersion, node, "local", e.Secrets["local"]); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("hello: %q", m)
	}
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdStateWatch).WithHeader(wire.HeaderID, "watch").WithBody(fmt.Appendf(nil, `{"ns":%q}`, ns)))
	for {
		m := r.Read(t)
		if m.Value(wire.HeaderReplyTo) == "watch" {
			if m.Value(wire.HeaderRC) != "0" {
				t.Fatalf("watch: %q", m)
			}
			return r
		}
	}
}

// awaitReset waits until the broker tells r to resync ns.
func awaitReset(t *testing.T, r *testbroker.Raw, ns string) {
	t.Helper()
	deadline := time.Now().Add(busSettle)
	for {
		m, err := r.ReadErr()
		var ne net.Error
		switch {
		case err == nil && m.Value(wire.HeaderCommand) == wire.CmdStateReset && strings.Contains(string(m.Body()), fmt.Sprintf(`"ns":%q`, ns)):
			return
		case errors.As(err, &ne) && ne.Timeout() && time.Now().Before(deadline):
			continue // a read waits 5 s at most; the bus may take longer to heal
		case err != nil:
			t.Fatalf("no bus.state.reset of %s: %v", ns, err)
		}
	}
}

// awaitSnapshot waits until c reads ns with owner and exactly the keys
// given (tombstones included).
func awaitSnapshot(t *testing.T, c *client.Client, ns, owner string, keys ...string) {
	t.Helper()
	testbroker.Await(t, busSettle, fmt.Sprintf("%s owned by %q with %v", ns, owner, keys), func() error {
		snap, err := c.State(ns).Snapshot(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		var got []string
		for _, e := range snap.Entries {
			got = append(got, e.Key)
		}
		slices.Sort(got)
		if snap.Owner != owner || !slices.Equal(got, keys) {
			return fmt.Errorf("%s is owned by %q with %v", ns, snap.Owner, got)
		}
		return nil
	})
}

// awaitDigests waits until every broker named has published rounds more
// state digests: by then every broker compared its namespaces with every
// other's and republished what differed, so a dropped namespace that
// digest repair would bring back is back.
func awaitDigests(t *testing.T, nc *testnats.Cluster, rounds int, brokers ...string) {
	t.Helper()
	conn, err := nats.Connect(nc.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var mu sync.Mutex
	seen := map[string]int{}
	if _, err := conn.Subscribe("busbar.state.*", func(m *nats.Msg) {
		var sm struct {
			Broker string `json:"broker"`
			NS     string `json:"ns"`
		}
		if json.Unmarshal(m.Data, &sm) == nil && sm.NS == "" {
			mu.Lock()
			seen[sm.Broker]++
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	testbroker.Await(t, busSettle, fmt.Sprint(rounds, " digest rounds"), func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range brokers {
			if seen[b] < rounds {
				return fmt.Errorf("%s published %d digests", b, seen[b])
			}
		}
		return nil
	})
}

// homeWatchedEverywhere starts a bus with alpha, beta and gamma on b1,
// b2 and b3, writes home/lamp as alpha, and, once every broker has it,
// watches home with a raw node on each broker.
func homeWatchedEverywhere(t *testing.T) (*bus, *client.Client, *client.Client, *client.Client, context.Context, []*testbroker.Raw) {
	t.Helper()
	u := startBus(t)
	alpha, beta, gamma := u.three(t)
	ctx := ctxT(t, 30*time.Second)
	if _, err := alpha.State("home").Set(ctx, "lamp", "on"); err != nil {
		t.Fatal(err)
	}
	var watchers []*testbroker.Raw
	for i, c := range []*client.Client{alpha, beta, gamma} {
		awaitSnapshot(t, c, "home", "alpha", "lamp")
		watchers = append(watchers, rawStateWatch(t, u.brokers[i], fmt.Sprint("watcher", i+1), "home"))
	}
	return u, alpha, beta, gamma, ctx, watchers
}

// TestBusStateDropReachesEveryBroker: a namespace dropped through one
// broker is gone from every broker, every broker's watchers are told to
// resync, and written again it comes back with the new writes only,
// whatever the digests carry afterwards.
func TestBusStateDropReachesEveryBroker(t *testing.T) {
	u, alpha, beta, gamma, ctx, watchers := homeWatchedEverywhere(t)
	if err := beta.State("home").Drop(ctx); err != nil { // on b2; alpha, on b1, owns it
		t.Fatal(err)
	}
	for _, w := range watchers {
		awaitReset(t, w, "home")
	}
	for _, c := range []*client.Client{alpha, beta, gamma} {
		awaitSnapshot(t, c, "home", "")
	}
	if _, err := gamma.State("home").Set(ctx, "fan", "off"); err != nil {
		t.Fatal(err)
	}
	awaitDigests(t, u.nats, 3, "b1", "b2", "b3")
	for _, c := range []*client.Client{alpha, beta, gamma} {
		awaitSnapshot(t, c, "home", "gamma", "fan")
	}
}

// TestBusStateDropReachesABrokerThatWasCutOff: a broker cut off from NATS
// while a namespace is dropped drops its copy when the cut heals, writes
// it took meanwhile included (the drop wins), and gets the namespace as
// it was written again after the drop.
func TestBusStateDropReachesABrokerThatWasCutOff(t *testing.T) {
	u, alpha, gamma, ctx := homeOnABus(t, "lamp", `"on"`)
	if _, err := alpha.State("home").Open(ctx, "door"); err != nil {
		t.Fatal(err)
	}
	awaitSnapshot(t, gamma, "home", "alpha", "door", "lamp")
	w := rawStateWatch(t, u.brokers[2], "watcher", "home")

	u.nats.Stop(2) // b3 is cut off
	awaitDirectory(t, u.brokers[:1], map[string]string{"alpha": "b1"})
	if err := alpha.State("home").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := gamma.State("home").Set(ctx, "door", "open"); err != nil { // on b3's copy: lost to the drop
		t.Fatal(err)
	}
	if _, err := alpha.State("home").Set(ctx, "fan", "off"); err != nil { // the namespace again, after the drop
		t.Fatal(err)
	}
	u.nats.Restart(t, 2)
	awaitReset(t, w, "home")
	awaitSnapshot(t, gamma, "home", "alpha", "fan")
	awaitDigests(t, u.nats, 3, "b1", "b2", "b3")
	for _, c := range []*client.Client{alpha, gamma, connect(t, u.brokers[1], "beta")} {
		awaitSnapshot(t, c, "home", "alpha", "fan")
	}
}

// TestBusStateDropAndNewOwnerReachABrokerThatWasStopped: a broker
// stopped while one namespace is dropped and another given a new owner,
// and started again on its store, drops its copy of the first (and does
// not give it back to the others) and takes the new owner of the second.
func TestBusStateDropAndNewOwnerReachABrokerThatWasStopped(t *testing.T) {
	nc := testnats.Start(t, 3)
	path := filepath.Join(t.TempDir(), "state.db")
	b1, b2 := stateBroker(t, nc, 0, ""), stateBroker(t, nc, 1, path)
	alpha, beta := connect(t, b1, "alpha"), connect(t, b2, "beta")
	ctx := ctxT(t, 30*time.Second)
	for _, ns := range []string{"home", "garden"} {
		if _, err := alpha.State(ns).Set(ctx, "lamp", "on"); err != nil {
			t.Fatal(err)
		}
		awaitValue(t, beta, ns, "lamp", `"on"`)
	}
	if err := b2.Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := alpha.State("home").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.State("garden").SetOwner(ctx, "heir"); err != nil {
		t.Fatal(err)
	}
	again := connect(t, stateBroker(t, nc, 1, path), "beta")
	awaitSnapshot(t, again, "home", "")
	awaitSnapshot(t, again, "garden", "heir", "lamp")
	awaitDigests(t, nc, 3, "b1", "b2")
	awaitSnapshot(t, alpha, "home", "")
	awaitSnapshot(t, again, "home", "")
}

// TestBusStateNewOwnerReachesEveryBroker: a namespace given to a new
// owner through one broker has it on every broker, a broker cut off
// meanwhile included once the cut heals: the old owner's writes are
// refused everywhere, the new owner's accepted anywhere, and the
// watchers on every broker are told to resync.
func TestBusStateNewOwnerReachesEveryBroker(t *testing.T) {
	u, alpha, beta, gamma, ctx, watchers := homeWatchedEverywhere(t)
	u.nats.Stop(2) // b3 is cut off
	awaitDirectory(t, u.brokers[:2], map[string]string{"alpha": "b1", "beta": "b2", "watcher1": "b1", "watcher2": "b2"})
	snap, err := beta.State("home").SetOwner(ctx, "heir")
	if err != nil || snap.Owner != "heir" {
		t.Fatalf("set owner: %+v %v", snap, err)
	}
	u.nats.Restart(t, 2)
	for _, w := range watchers {
		awaitReset(t, w, "home")
	}
	for _, c := range []*client.Client{alpha, beta, gamma} {
		awaitSnapshot(t, c, "home", "heir", "lamp")
	}
	for _, c := range []*client.Client{alpha, gamma} {
		if _, err := c.State("home").Set(ctx, "lamp", "off"); err == nil || !strings.Contains(err.Error(), "belongs to heir") {
			t.Fatalf("a write by the old owner: %v", err)
		}
	}
	heir := connect(t, u.brokers[2], "heir")
	if _, err := heir.State("home").Set(ctx, "lamp", "dim"); err != nil {
		t.Fatal(err)
	}
	awaitValue(t, alpha, "home", "lamp", `"dim"`)
}

// TestBusClientFailsOverToAnotherBroker: a client given two brokers of a
// bus, with the default reconnect, survives the loss of its broker: it
// moves to the other, its handler and its state watch with it (the watch
// resynced), and a node on a third broker reaches it there.
func TestBusClientFailsOverToAnotherBroker(t *testing.T) {
	u := startBus(t)
	gamma := connect(t, u.brokers[2], "gamma")
	events := make(chan client.ConnEvent, 8)
	alpha := connect(t, u.brokers[0], "alpha", func(o *client.Options) {
		o.Server = u.brokers[0].Endpoint + "," + u.brokers[1].Endpoint
		o.OnConnEvent = func(ev client.ConnEvent) { events <- ev }
	})
	ctx := ctxT(t, 30*time.Second)
	if _, err := alpha.Scope("s").Channel("ping").Handle(ctx, echo); err != nil {
		t.Fatal(err)
	}
	w, err := alpha.State("home").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := u.brokers[0].Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []client.ConnEventKind{client.Disconnected, client.Reconnected} {
		select {
		case ev := <-events:
			if ev.Kind != want || want == client.Reconnected && (ev.Broker != "b2" || ev.Err != nil) {
				t.Fatalf("event %+v, want %s", ev, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
	}
	if _, err := gamma.State("home").Set(ctx, "lamp", "on"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Changes():
		if e.Key != "lamp" || e.Source != "gamma" {
			t.Fatalf("the watch saw %+v", e)
		}
	case <-ctx.Done():
		t.Fatal("the watch saw nothing after the failover")
	}
	awaitKnown(t, u.brokers[1:], "alpha")
	testbroker.Await(t, busSettle, "gamma's request to reach alpha on b2", func() error {
		r, err := gamma.Scope("s").Channel("ping").Request(ctxT(t, 5*time.Second), "alpha", []byte("hi"))
		if err != nil {
			return err
		}
		if string(r.Payload()) != "hi" {
			return fmt.Errorf("reply %q", r.Payload())
		}
		return nil
	})
}
