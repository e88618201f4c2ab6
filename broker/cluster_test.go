package broker_test

// Brokers joined through NATS (docs/cluster.md), tested on a real routed
// cluster of three NATS servers in this process and three real brokers,
// each on its own NATS server, with real clients over TCP.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/wire"
)

// three connects alpha, beta and gamma, one to each broker.
func (u *bus) three(t *testing.T) (*client.Client, *client.Client, *client.Client) {
	return connect(t, u.brokers[0], "alpha"), connect(t, u.brokers[1], "beta"), connect(t, u.brokers[2], "gamma")
}

// where returns node → broker as env's broker lists them.
func where(e *testbroker.Env) map[string]string {
	out := map[string]string{}
	for _, n := range e.Broker.Directory() {
		out[n.Node] = n.Broker
	}
	return out
}

// awaitDirectory waits until every broker in envs lists exactly want
// (node → broker), ignoring the brokers' own in-process nodes.
func awaitDirectory(t *testing.T, envs []*testbroker.Env, want map[string]string) {
	t.Helper()
	for _, e := range envs {
		testbroker.Await(t, busSettle, e.Broker.Name()+"'s directory", func() error {
			if got := where(e); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s lists %v, want %v", e.Broker.Name(), got, want)
			}
			return nil
		})
	}
}

// TestBusDirectoryListsEveryNodeWithItsBroker: a node connected to any
// broker is in every broker's directory, with its broker and its
// subscriptions, and bus.directory on any broker says so.
func TestBusDirectoryListsEveryNodeWithItsBroker(t *testing.T) {
	u := startBus(t)
	alpha := connect(t, u.brokers[0], "alpha")
	connect(t, u.brokers[1], "beta")
	gamma := connect(t, u.brokers[2], "gamma")
	if _, err := gamma.Scope("s").Channel("orders").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1", "beta": "b2", "gamma": "b3"})
	testbroker.Await(t, busSettle, "gamma's subscription on b1", func() error {
		nodes, err := alpha.Directory(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		i := slices.IndexFunc(nodes, func(n wire.NodeInfo) bool { return n.Node == "gamma" })
		if i < 0 || !slices.Equal(nodes[i].Subscriptions, []string{"orders"}) || nodes[i].Broker != "b3" {
			return fmt.Errorf("b1 lists %+v", nodes)
		}
		return nil
	})
}

// TestBusWhoisListsServicesOfEveryBroker: the registry is bus-wide, and
// one name announced on two brokers is a collision on both.
func TestBusWhoisListsServicesOfEveryBroker(t *testing.T) {
	u := startBus(t)
	alpha, beta, gamma := u.three(t)
	ctx := ctxT(t, 5*time.Second)
	if _, err := beta.Announce(ctx, wire.Announcement{Service: "billing", Channels: []string{"bill.get"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := gamma.Announce(ctx, wire.Announcement{Service: "cache"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.Announce(ctx, wire.Announcement{Service: "cache"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{alpha, beta, gamma} {
		testbroker.Await(t, busSettle, "the bus-wide registry", func() error {
			svcs, err := c.Whois(ctxT(t, 5*time.Second), "")
			if err != nil {
				return err
			}
			var got []string
			for _, s := range svcs {
				got = append(got, fmt.Sprintf("%s@%s/%s collision=%v", s.Service, s.Provenance.Node, s.Provenance.Broker, s.Collision))
			}
			want := []string{"billing@beta/b2 collision=false", "cache@alpha/b1 collision=true", "cache@gamma/b3 collision=true"}
			if !slices.Equal(got, want) {
				return fmt.Errorf("whois = %v, want %v", got, want)
			}
			return nil
		})
	}
	if err := gamma.Withdraw(ctx, "cache"); err != nil {
		t.Fatal(err)
	}
	testbroker.Await(t, busSettle, "the withdrawal on b1", func() error {
		svcs, err := alpha.Whois(ctxT(t, 5*time.Second), "cache")
		if err != nil {
			return err
		}
		if len(svcs) != 1 || svcs[0].Provenance.Node != "alpha" || svcs[0].Collision {
			return fmt.Errorf("whois cache = %+v", svcs)
		}
		return nil
	})
}

// TestBusNodeNameOnTwoBrokersReplacesTheOld: the same node connecting to
// another broker replaces its old connection, as it would on one broker:
// the old one ends with REPLACED and every directory lists the new one.
func TestBusNodeNameOnTwoBrokersReplacesTheOld(t *testing.T) {
	u := startBus(t)
	old := connect(t, u.brokers[0], "alpha")
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1"})
	connect(t, u.brokers[2], "alpha")
	select {
	case <-old.Done():
	case <-time.After(busSettle):
		t.Fatal("the old connection on b1 was not closed")
	}
	if err := old.Err(); err == nil || !strings.Contains(err.Error(), string(wire.ResultReplaced)) {
		t.Fatalf("old connection ended with %v", err)
	}
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b3"})
}

// TestBusNodeMayNotTakeABrokersName: a broker's name is its own endpoint
// on every broker of the bus.
func TestBusNodeMayNotTakeABrokersName(t *testing.T) {
	u := startBus(t)
	connect(t, u.brokers[1], "probe")
	awaitDirectory(t, u.brokers[:1], map[string]string{"probe": "b2"}) // b1 has heard from b2
	_, err := dialClient(u.brokers[0], "b2")
	if !errors.Is(err, client.ErrAuth) {
		t.Fatalf("node named b2 on b1: %v", err)
	}
}

// TestBusBrokerThatLeavesTakesItsNodes: a broker that shuts down takes
// its nodes out of every other directory (it says goodbye).
func TestBusBrokerThatLeavesTakesItsNodes(t *testing.T) {
	u := startBus(t)
	connect(t, u.brokers[0], "alpha")
	connect(t, u.brokers[1], "beta")
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1", "beta": "b2"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.brokers[1].Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	awaitDirectory(t, []*testbroker.Env{u.brokers[0], u.brokers[2]}, map[string]string{"alpha": "b1"})
}

// TestBusBrokerCutOffFromNATS: a broker whose NATS server dies (no
// goodbye: a crash or a partition, as the others see it) drops from every
// other directory within Lease + Heartbeat; it sees the others vanish
// too; when its server is back, both sides see each other again.
func TestBusBrokerCutOffFromNATS(t *testing.T) {
	u := startBus(t)
	connect(t, u.brokers[0], "alpha")
	connect(t, u.brokers[2], "gamma")
	all := map[string]string{"alpha": "b1", "gamma": "b3"}
	awaitDirectory(t, u.brokers, all)
	start := time.Now()
	u.nats.Stop(2) // b3's only server
	awaitDirectory(t, u.brokers[:2], map[string]string{"alpha": "b1"})
	t.Logf("b3's nodes gone from b1 and b2 after %v (bound: lease %v + heartbeat %v)", time.Since(start).Round(time.Millisecond), busLease, busHeartbeat)
	awaitDirectory(t, u.brokers[2:], map[string]string{"gamma": "b3"})
	u.nats.Restart(t, 2)
	awaitDirectory(t, u.brokers, all)
}

// TestBusSurvivesTheLossOfOneNATSServer: a broker given every NATS server
// moves to another when its own dies; the directory keeps working.
func TestBusSurvivesTheLossOfOneNATSServer(t *testing.T) {
	nc := testnats.Start(t, 3)
	u := &bus{nats: nc}
	u.brokers = append(u.brokers, u.startBroker(t, 0, nc.URL(0), nc.URL(1)), u.startBroker(t, 1, nc.URL(1)))
	connect(t, u.brokers[0], "alpha")
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1"})
	nc.Stop(0)
	later := connect(t, u.brokers[0], "later")
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1", "later": "b1"})
	// Traffic goes on: a request from b2's node to b1's.
	if _, err := later.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	beta := connect(t, u.brokers[1], "beta")
	awaitKnown(t, u.brokers[:1], "beta")
	m, err := beta.Scope("s").Channel("echo").Request(ctxT(t, 5*time.Second), "later", []byte("hi"))
	if err != nil || string(m.Payload()) != "hi" {
		t.Fatalf("request across the bus after a NATS server died: %v", err)
	}
}

// TestClusterOptionsAreChecked: a broker joining a bus needs its own name,
// a lease of at least two heartbeats, and NATS to answer.
func TestClusterOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts broker.Options
		want string
	}{
		{"default name", broker.Options{Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}}}, "needs a name of its own"},
		{"lease", broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, Heartbeat: time.Second, Lease: 1999 * time.Millisecond}}, "at least twice"},
		{"tombstone retention", broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, TombstoneRetention: -time.Nanosecond}}, "TombstoneRetention -1ns is negative"},
		{"tls pair", broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, TLSCert: "c.pem"}}, "go together"},
		{"prefix", broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, SubjectPrefix: "a.>"}}, "not a NATS subject prefix"},
		{"relay name", broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, Relays: []string{"b2", ""}}}, "is not a broker name"},
		{"relay without a store", broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, Relays: []string{"b2", "b1"}}}, "has no RelayDir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := broker.New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("lease of exactly two heartbeats", func(t *testing.T) {
		nc := testnats.Start(t, 1)
		b, err := broker.New(broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: nc.URLs(), Heartbeat: time.Second, Lease: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no NATS", func(t *testing.T) {
		_, err := broker.New(broker.Options{Name: "b1", Cluster: broker.ClusterOptions{URLs: []string{"nats://127.0.0.1:1"}, ConnectTimeout: time.Second}})
		if !errors.Is(err, broker.ErrCluster) {
			t.Fatalf("New without NATS: %v", err)
		}
	})
}

// parkRequest connects beta to b2 with a handler that never answers
// during the test, and returns the outcome of alpha's request to it, once
// the handler holds it.
func parkRequest(t *testing.T, u *bus, alpha *client.Client) <-chan error {
	t.Helper()
	beta := connect(t, u.brokers[1], "beta")
	entered := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	if _, err := beta.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		close(entered)
		<-release
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	awaitKnown(t, u.brokers[:1], "beta")
	res := make(chan error, 1)
	go func() {
		_, err := alpha.Scope("s").Channel("work").Request(ctxT(t, 30*time.Second), "beta", nil)
		res <- err
	}()
	<-entered
	return res
}

// TestBusCallsToACutOffBrokerFail: a request waiting on a node whose
// broker is cut off from NATS fails with DISCONNECT once that broker's
// lease runs out, never later; nothing is replayed.
func TestBusCallsToACutOffBrokerFail(t *testing.T) {
	u := startBus(t)
	alpha := connect(t, u.brokers[0], "alpha")
	res := parkRequest(t, u, alpha)
	start := time.Now()
	u.nats.Stop(1) // b2's only server
	if err := <-res; !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("request to the cut-off broker: %v", err)
	}
	t.Logf("the call failed after %v (bound: lease %v + heartbeat %v)", time.Since(start).Round(time.Millisecond), busLease, busHeartbeat)
	if r, _ := alpha.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "beta", nil); r.Result != wire.NotConnected {
		t.Fatalf("send to beta while its broker is cut off: %+v", r)
	}
}

// TestBusBrokerCannotSendInAnotherBrokersName: a frame a broker sends
// over NATS in the name of the receiver's own node, or of a third
// broker's node, is dropped and counted; one in its own nodes' names
// passes (docs/cluster.md#trust).
func TestBusBrokerCannotSendInAnotherBrokersName(t *testing.T) {
	u := startBus(t)
	alpha := connect(t, u.brokers[0], "alpha")
	connect(t, u.brokers[2], "gamma")
	var in inbox
	if _, err := alpha.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	awaitKnown(t, u.brokers[:1], "gamma")
	nc, err := nats.Connect(u.nats.URL(1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	before := u.brokers[0].Broker.Stats().Drops[broker.DropPeerRefused]
	// One NATS message of length-prefixed frames, as a link sends them
	// (behind its header: epoch, offset, frame number): b2 speaking for
	// b3's node, for b1's own, for itself, and for b3's node again after
	// a frame it may send.
	batch := make([]byte, 24)
	binary.BigEndian.PutUint64(batch, 7)
	for i, from := range []string{"gamma.bus", "alpha.bus", "b2.bus", "gamma.bus"} {
		m := wire.New(wire.TypeEvent, "ev").WithHeader(wire.HeaderID, fmt.Sprint("f", i)).WithHeader(wire.HeaderTo, "alpha").
			WithHeader(wire.HeaderFrom, from).WithBody([]byte(from))
		batch = binary.BigEndian.AppendUint32(batch, uint32(m.WireLen()))
		batch = m.AppendWire(batch)
	}
	if err := nc.Publish("busbar.to.b1.b2", batch); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "b2's own message delivered", func() bool { return in.Len() >= 1 })
	if n, got := in.Len(), in.Get(0).From(); n != 1 || got != "b2.bus" {
		t.Fatalf("%d delivered, the first from %q", n, got)
	}
	testbroker.Eventually(t, 5*time.Second, "the forged frames refused", func() bool {
		return u.brokers[0].Broker.Stats().Drops[broker.DropPeerRefused]-before >= 3
	})
	if d := u.brokers[0].Broker.Stats().Drops[broker.DropPeerRefused] - before; d != 3 || in.Len() != 1 {
		t.Fatalf("%d frames refused, want 3; %d delivered, want 1", d, in.Len())
	}
	// A batch cut short (its frame claims more bytes than follow) is
	// refused, counted once, and breaks nothing.
	if err := nc.Publish("busbar.to.b1.b2", append(binary.BigEndian.AppendUint32(make([]byte, 24), 100), "---\n"...)); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "the short batch refused", func() bool {
		return u.brokers[0].Broker.Stats().Drops[broker.DropPeerRefused]-before == 4
	})
}

// smallNATS is a bus of two brokers on a NATS cluster whose max_payload
// is small, for the limits that follow from it.
func smallNATS(t *testing.T, maxPayload int32) *bus { return smallNATSWith(t, maxPayload, testOpts()) }

// smallNATSWith is smallNATS with opts for both brokers.
func smallNATSWith(t *testing.T, maxPayload int32, opts broker.Options) *bus {
	nc := testnats.Start(t, 3, func(o *server.Options) { o.MaxPayload = maxPayload })
	u := &bus{nats: nc}
	for i := range 2 {
		u.brokers = append(u.brokers, u.startBrokerWith(t, opts, i, nc.URL(i)))
	}
	return u
}

// TestBusSharesTakeAsManyPagesAsNATSNeeds: a share larger than NATS's
// max_payload goes in pages and arrives whole; a node whose entry alone
// is over a page is left out of it (and logged), the others not.
func TestBusSharesTakeAsManyPagesAsNATSNeeds(t *testing.T) {
	u := smallNATS(t, 8<<10)
	want := map[string]string{}
	for i := range 60 { // some 300 bytes each: three pages or more
		name := fmt.Sprintf("n%02d", i)
		connect(t, u.brokers[1], name)
		want[name] = "b2"
	}
	big := connect(t, u.brokers[1], "big")
	for i := range 64 { // 64 channels of 120 bytes: an entry over the 7 KiB page
		ch := fmt.Sprintf("%s.%03d", strings.Repeat("c", 116), i)
		if _, err := big.Scope("s").Channel(ch).Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
			t.Fatal(err)
		}
	}
	connect(t, u.brokers[1], "zz") // a snapshot with zz is one from after big's subscriptions
	want["zz"] = "b2"
	awaitDirectory(t, u.brokers[:1], want)
}

// TestBusMessageOverTheNATSPayloadIsRejected: a request whose frame fits
// NATS's max_payload (less the bus key's room, with one) crosses; one byte
// more is REJECTED by the sender's broker, and a reply over it fails the
// call (HANDLER_FAILED) without breaking the link: the next request
// passes.
func TestBusMessageOverTheNATSPayloadIsRejected(t *testing.T) {
	t.Run("no key", func(t *testing.T) { messageOverTheNATSPayload(t, testOpts(), 0) })
	t.Run("sealed bus key", func(t *testing.T) {
		opts := testOpts()
		opts.Cluster.BusKey, opts.Cluster.SealPayloads = busKeyA, true
		messageOverTheNATSPayload(t, opts, broker.BusKeyRoom(broker.DefaultClusterSubjectPrefix))
	})
}

func messageOverTheNATSPayload(t *testing.T, opts broker.Options, room int) {
	const maxPayload = 8 << 10
	u := smallNATSWith(t, maxPayload, opts)
	alpha := connect(t, u.brokers[0], "alpha")
	beta := connect(t, u.brokers[1], "beta")
	ctx := ctxT(t, 30*time.Second)
	if _, err := beta.Scope("s").Channel("small").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := beta.Scope("s").Channel("big").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
		return make([]byte, maxPayload), nil
	}); err != nil {
		t.Fatal(err)
	}
	awaitKnown(t, u.brokers[:1], "beta")
	ch := alpha.Scope("s").Channel("small")
	fits := func(n int) bool {
		_, err := ch.Request(ctx, "beta", make([]byte, n))
		switch {
		case err == nil:
			return true
		case errors.Is(err, client.ErrRejected) && strings.Contains(err.Error(), "NATS payload limit"):
			return false
		}
		t.Fatalf("request of %d bytes: %v", n, err)
		return false
	}
	lo, hi := 0, maxPayload // fits(lo), !fits(hi)
	if !fits(lo) || fits(hi) {
		t.Fatal("the edge is not within [0, max_payload]")
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	// lo is the largest payload that crosses: its frame's headers take the
	// rest of the limit, a few hundred bytes, and the envelope its room.
	if lo < maxPayload-512-room {
		t.Fatalf("the largest payload that crosses is %d bytes, far below the limit of %d", lo, maxPayload)
	}
	t.Logf("the largest payload across brokers: %d of max_payload %d", lo, maxPayload)
	if _, err := alpha.Scope("s").Channel("big").Request(ctx, "beta", nil); !errors.Is(err, client.ErrHandlerFailed) {
		t.Fatalf("a reply over the limit: %v", err)
	}
	if _, err := ch.Request(ctx, "beta", nil); err != nil {
		t.Fatalf("the link after a reply over the limit: %v", err)
	}
}

// TestBusWatchSeesServicesOfEveryBroker: a registry watch on one broker
// starts from the bus's registry and hears what is announced, withdrawn
// or lost with its broker anywhere on the bus.
func TestBusWatchSeesServicesOfEveryBroker(t *testing.T) {
	u := startBus(t)
	alpha, beta, gamma := u.three(t)
	ctx := ctxT(t, 10*time.Second)
	if _, err := gamma.Announce(ctx, wire.Announcement{Service: "cache"}); err != nil {
		t.Fatal(err)
	}
	testbroker.Await(t, busSettle, "cache in b1's registry", func() error {
		if svcs, err := alpha.Whois(ctx, "cache"); err != nil || len(svcs) != 1 {
			return fmt.Errorf("whois cache: %v %v", svcs, err)
		}
		return nil
	})
	w, err := alpha.WatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if init := w.Initial(); len(init) != 1 || init[0].Service != "cache" || init[0].Provenance.Broker != "b3" {
		t.Fatalf("the watch starts from %+v", init)
	}
	if _, err := beta.Announce(ctx, wire.Announcement{Service: "billing"}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "up billing@beta collision=false")
	if err := beta.Withdraw(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "down billing@beta collision=false")
	if err := u.brokers[2].Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "down cache@gamma collision=false")
}

// TestBusBrokerRestartFailsTheCallsOfItsOldProcess: a broker that died
// without a goodbye and came back (a new process of the same name) is
// told apart by its first share, and the calls waiting on the old process
// fail then (DISCONNECT), not at their deadline, nor at a lease that the
// new process keeps alive.
func TestBusBrokerRestartFailsTheCallsOfItsOldProcess(t *testing.T) {
	nc := testnats.Start(t, 3)
	u := &bus{nats: nc}
	opts := testOpts()
	opts.DrainTimeout = 10 * time.Millisecond
	start := func(i int) *testbroker.Env {
		o := opts
		o.Name = fmt.Sprintf("b%d", i+1)
		o.Cluster = broker.ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: busHeartbeat, Lease: time.Minute}
		return testbroker.Start(t, "tcp", o)
	}
	u.brokers = []*testbroker.Env{start(0), start(1)}
	alpha := connect(t, u.brokers[0], "alpha")
	res := parkRequest(t, u, alpha)
	nc.Stop(1) // b2 is cut off, then stops: its goodbye cannot leave
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.brokers[1].Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	nc.Restart(t, 1)
	start(1) // the new b2
	if err := <-res; !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("the call on the old b2: %v", err)
	}
}
