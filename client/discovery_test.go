package client_test

// Service discovery through the client: announce and whois, registry
// watches, collisions, bare-name targets, announcement limits, instance ids
// and requests to this node itself.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
	"busbar/transport"
	"busbar/wire"
)

// nextEvent reads one registry event or fails after d.
func nextEvent(t *testing.T, w *client.ServiceWatch, d time.Duration) wire.ServiceEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(d):
		t.Fatal("no registry event")
	}
	panic("unreachable")
}

// expectEvents reads len(want) events and compares op, service, node and
// collision flag, in order.
func expectEvents(t *testing.T, w *client.ServiceWatch, want ...string) {
	t.Helper()
	for i, wantEv := range want {
		ev := nextEvent(t, w, 5*time.Second)
		got := fmt.Sprintf("%s %s@%s collision=%v", ev.Op, ev.Service.Service, ev.Service.Provenance.Node, ev.Service.Collision)
		if got != wantEv {
			t.Fatalf("event %d = %q, want %q", i, got, wantEv)
		}
	}
}

// TestAnnounceAndWhois: an announcement's record, found by whois and
// the directory from another node, and withdrawn: on one broker over
// every transport, and from another broker of a bus.
func TestAnnounceAndWhois(t *testing.T) {
	eachPlacement(t, func(t *testing.T, p testbus.Placement) {
		alpha := connect(t, p.At(0), "alpha")
		beta := connect(t, p.At(1), "beta")
		ctx := ctxT(t, 20*time.Second)
		a := wire.Announcement{Service: "billing", Version: "1.2.0", SchemaVersion: 3,
			Meta: json.RawMessage(`{"region":"eu"}`), Channels: []string{"billing.refund", "billing.charge", "billing.charge"}}
		info, err := alpha.Announce(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if info.Address != "billing.alpha.bus" || info.IID != alpha.IID() || info.IID == "" || info.Collision ||
			info.Provenance.Node != "alpha" || info.Provenance.Epoch != alpha.Epoch() || info.Provenance.Principal != "local" ||
			time.Since(info.Provenance.At) > time.Minute || strings.Join(info.Channels, ",") != "billing.charge,billing.refund" {
			t.Fatalf("record = %+v", info)
		}
		p.Settled(t, "whois from another node", func() error {
			all, err := beta.Whois(ctx, "")
			if err != nil || len(all) != 1 || all[0].Address != "billing.alpha.bus" || string(all[0].Meta) != `{"region":"eu"}` ||
				all[0].Version != "1.2.0" || all[0].SchemaVersion != 3 {
				return fmt.Errorf("whois = %+v, %v", all, err)
			}
			return nil
		})
		if one, err := beta.Whois(ctx, "billing"); err != nil || len(one) != 1 {
			t.Fatalf("whois billing = %+v, %v", one, err)
		}
		if none, err := beta.Whois(ctx, "search"); err != nil || len(none) != 0 {
			t.Fatalf("whois search = %+v, %v", none, err)
		}
		// The directory carries the instance id too.
		nodes, err := beta.Directory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.Node == "alpha" && n.IID != alpha.IID() {
				t.Fatalf("directory iid %q, client %q", n.IID, alpha.IID())
			}
		}
		if err := alpha.Withdraw(ctx, "billing"); err != nil {
			t.Fatal(err)
		}
		if err := alpha.Withdraw(ctx, "billing"); !errors.Is(err, client.ErrRejected) {
			t.Fatalf("second withdraw: %v", err)
		}
		p.Settled(t, "the withdrawal seen from another node", func() error {
			if all, err := beta.Whois(ctx, ""); err != nil || len(all) != 0 {
				return fmt.Errorf("after withdraw: %+v %v", all, err)
			}
			return nil
		})
	})
}

// TestWatchServices: a watch's snapshot, then every change once, in
// order, the same on two watches of one client. One broker: it checks
// every intermediate change, and another broker's changes arrive as its
// share does, a snapshot that may fold several changes into one
// (docs/cluster.md; across brokers: broker.TestBusWatchSeesServicesOfEveryBroker,
// broker.TestBusCollisionAcrossBrokersRaisesTheSameEvents).
func TestWatchServices(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	alpha := connect(t, e, "alpha")
	watcher := connect(t, e, "watcher")
	ctx := ctxT(t, 10*time.Second)
	if _, err := alpha.Announce(ctx, wire.Announcement{Service: "billing"}); err != nil {
		t.Fatal(err)
	}
	w, err := watcher.WatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if len(w.Initial()) != 1 || w.Initial()[0].Address != "billing.alpha.bus" {
		t.Fatalf("initial = %+v", w.Initial())
	}
	// A second watch on the same client gets its own snapshot and the same
	// changes after it.
	w2, err := watcher.WatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gamma := connect(t, e, "gamma")
	if _, err := gamma.Announce(ctx, wire.Announcement{Service: "search", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := gamma.Announce(ctx, wire.Announcement{Service: "search", Version: "2"}); err != nil {
		t.Fatal(err)
	}
	if err := gamma.Withdraw(ctx, "search"); err != nil {
		t.Fatal(err)
	}
	if _, err := gamma.Announce(ctx, wire.Announcement{Service: "index"}); err != nil {
		t.Fatal(err)
	}
	gamma.Close() // its services go with it
	for _, w := range []*client.ServiceWatch{w, w2} {
		expectEvents(t, w,
			"up search@gamma collision=false",
			"up search@gamma collision=false",
			"down search@gamma collision=false",
			"up index@gamma collision=false",
			"down index@gamma collision=false")
	}
	// Nothing more: the next event on each watch is a marker announced now.
	if _, err := alpha.Announce(ctx, wire.Announcement{Service: "marker"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*client.ServiceWatch{w, w2} {
		expectEvents(t, w, "up marker@alpha collision=false")
	}
	w2.Close()
	if _, ok := <-w2.Events(); ok || w2.Err() != nil {
		t.Fatalf("closed watch: err %v", w2.Err())
	}
	// The first watch still runs after the second closed.
	if _, err := alpha.Announce(ctx, wire.Announcement{Service: "mail"}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, "up mail@alpha collision=false")
	// A cancelled context ends a watch.
	wctx, cancel := context.WithCancel(ctx)
	w3, err := watcher.WatchServices(wctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range w3.Events() {
	}
	if !errors.Is(w3.Err(), context.Canceled) {
		t.Fatalf("cancelled watch: %v", w3.Err())
	}
}

// TestServiceCollision: one service name announced by two nodes is a
// collision for both, with its events; both stay reachable by address,
// the bare name is ambiguous until one goes. On a bus the two and the
// watcher are on three brokers.
func TestServiceCollision(t *testing.T) {
	eachPlacement(t, func(t *testing.T, p testbus.Placement) {
		alpha := connect(t, p.At(0), "alpha")
		beta := connect(t, p.At(1), "beta")
		caller := connect(t, p.At(2), "caller")
		ctx := ctxT(t, 20*time.Second)
		w, err := caller.WatchServices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for _, c := range []*client.Client{alpha, beta} {
			name := c.Node()
			if _, err := c.Scope("s").Channel("cache.get").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
				return []byte(name), nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if info, err := alpha.Announce(ctx, wire.Announcement{Service: "cache", Channels: []string{"cache.get"}}); err != nil || info.Collision {
			t.Fatalf("first: %+v %v", info, err)
		}
		expectEvents(t, w, "up cache@alpha collision=false")
		p.Settled(t, "the first announcement seen by the second node", func() error {
			if list, err := beta.Whois(ctx, "cache"); err != nil || len(list) != 1 {
				return fmt.Errorf("%+v %v", list, err)
			}
			return nil
		})
		p.Sees(t, "alpha", "beta")
		if info, err := beta.Announce(ctx, wire.Announcement{Service: "cache", Channels: []string{"cache.get"}}); err != nil || !info.Collision {
			t.Fatalf("second: %+v %v", info, err)
		}
		expectEvents(t, w,
			"up cache@beta collision=true",
			"collision cache@alpha collision=true",
			"collision cache@beta collision=true")
		list, err := caller.Whois(ctx, "cache")
		if err != nil || len(list) != 2 || !list[0].Collision || !list[1].Collision || list[0].IID == list[1].IID {
			t.Fatalf("whois = %+v %v", list, err)
		}
		// Both are still delivered by address; the bare name is ambiguous.
		ch := caller.Scope("c").Channel("cache.get")
		for _, node := range []string{"alpha", "beta"} {
			if m, err := ch.Request(ctx, "cache."+node+".bus", nil); err != nil || string(m.Payload()) != node {
				t.Fatalf("request to cache.%s.bus: %v", node, err)
			}
		}
		_, err = ch.Request(ctx, "cache", nil)
		var re *client.RequestError
		if !errors.Is(err, client.ErrAmbiguous) || !errors.As(err, &re) || re.Kind != wire.ResultAmbiguous || !strings.Contains(re.Text, "alpha, beta") {
			t.Fatalf("bare name with two instances: %v", err)
		}
		// When one leaves, the collision is over and the name resolves.
		beta.Close()
		expectEvents(t, w, "down cache@beta collision=true", "up cache@alpha collision=false")
		p.Settled(t, "the bare name with one instance", func() error {
			if m, err := ch.Request(ctx, "cache", nil); err != nil || string(m.Payload()) != "alpha" || m.From() != "alpha.bus" {
				return fmt.Errorf("%v", err)
			}
			return nil
		})
	})
}

// TestBareTargetResolution: a request or send reaches a node by its
// service's bare name, its service address, its name and its address;
// a name that is neither is NO_HANDLER. On a bus the caller is on
// another broker.
func TestBareTargetResolution(t *testing.T) {
	testbus.EachTopology(t, testOpts(), func(t *testing.T, p testbus.Placement) {
		alpha := connect(t, p.At(0), "alpha")
		caller := connect(t, p.At(1), "caller")
		ctx := ctxT(t, 20*time.Second)
		if _, err := alpha.Scope("s").Channel("math.double").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
			return append(m.Payload(), m.Payload()...), nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := alpha.Announce(ctx, wire.Announcement{Service: "calc", Channels: []string{"math.double"}}); err != nil {
			t.Fatal(err)
		}
		var in inbox
		if _, err := alpha.Scope("s").Channel("news").Subscribe(ctx, in.Handler); err != nil {
			t.Fatal(err)
		}
		p.Sees(t, "alpha:news")
		ch := caller.Scope("c").Channel("math.double")
		p.Settled(t, "the service known to the caller's broker", func() error {
			if list, err := caller.Whois(ctx, "calc"); err != nil || len(list) != 1 {
				return fmt.Errorf("%+v %v", list, err)
			}
			return nil
		})
		for _, target := range []string{"calc", "calc.alpha.bus", "alpha", "alpha.bus"} {
			if m, err := ch.Request(ctx, target, []byte("ab")); err != nil || string(m.Payload()) != "abab" {
				t.Fatalf("request to %s: %v", target, err)
			}
		}
		// A name that is neither a service nor a node is a typed error.
		if _, err := ch.Request(ctx, "nosuch", nil); !errors.Is(err, client.ErrNoHandler) {
			t.Fatalf("unknown name: %v", err)
		}
		// A send to a bare service name reaches its node too.
		if r, _ := caller.Scope("c").Channel("news").Send(ctx, "calc", []byte("x")); r.Result != wire.Accepted || r.Node != "alpha.bus" {
			t.Fatalf("send to calc: %+v", r)
		}
	})
}

// TestAnnounceLimits: every limit of an announcement at and past its
// edge. One broker: the announcer's broker checks them.
func TestAnnounceLimits(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	alpha := connect(t, e, "alpha")
	ctx := ctxT(t, 10*time.Second)
	rejected := func(what string, a wire.Announcement) {
		t.Helper()
		if _, err := alpha.Announce(ctx, a); !errors.Is(err, client.ErrRejected) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ok := func(what string, a wire.Announcement) {
		t.Helper()
		if _, err := alpha.Announce(ctx, a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ok("version at the limit", wire.Announcement{Service: "v", Version: strings.Repeat("1", wire.MaxVersionLen)})
	rejected("version past the limit", wire.Announcement{Service: "v", Version: strings.Repeat("1", wire.MaxVersionLen+1)})
	meta := func(n int) json.RawMessage { // a JSON object of exactly n bytes
		return json.RawMessage(`{"k":"` + strings.Repeat("m", n-8) + `"}`)
	}
	ok("meta at the limit", wire.Announcement{Service: "m", Meta: meta(wire.MaxMetaBytes)})
	rejected("meta past the limit", wire.Announcement{Service: "m", Meta: meta(wire.MaxMetaBytes + 1)})
	rejected("meta not an object", wire.Announcement{Service: "m", Meta: json.RawMessage(`[1]`)})
	rejected("bad service name", wire.Announcement{Service: "Bad_Name"})
	rejected("negative schema", wire.Announcement{Service: "s", SchemaVersion: -1})
	rejected("reserved channel", wire.Announcement{Service: "s", Channels: []string{"bus.hello"}})
	// The broker checks too, whatever the client sends.
	raw := e.DialRaw(t)
	raw.Hello(t, wire.ProtocolVersion, "rawnode", "local", e.Secrets["local"])
	raw.Send(t, wire.New(wire.TypeRequest, wire.CmdAnnounce).WithHeader(wire.HeaderID, "1").WithBody([]byte(`{"service":"x","meta":[1]}`)))
	raw.Send(t, wire.New(wire.TypeRequest, wire.CmdAnnounce).WithHeader(wire.HeaderID, "2").WithBody([]byte(`not json`)))
	for _, id := range []string{"1", "2"} {
		m := raw.Read(t)
		if m.Value(wire.HeaderReplyTo) != id || m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
			t.Fatalf("raw announce %s answered %q", id, m)
		}
	}
	// Services per connection: alpha holds "v" and "m"; fill up to the limit.
	for i := 2; i < broker.MaxServicesPerNode; i++ {
		ok("service within the limit", wire.Announcement{Service: fmt.Sprintf("s%d", i)})
	}
	rejected("one service past the limit", wire.Announcement{Service: "one-more"})
	ok("re-announcing one it has", wire.Announcement{Service: "s2", Version: "2"})
}

// TestInstanceIDs: a chosen instance id, refused to another live node,
// kept across a reconnection. One broker: instance ids are checked
// against the directory of the broker a node connects to; on a bus two
// nodes on two brokers are not kept from sharing one (not built).
func TestInstanceIDs(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha", func(o *client.Options) { o.IID = "instance-1" })
	if a.IID() != "instance-1" {
		t.Fatalf("iid %q", a.IID())
	}
	// Another node may not take a live instance id.
	if _, err := dialClient(e, "beta", func(o *client.Options) { o.IID = "instance-1" }); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("duplicate iid: %v", err)
	}
	// A malformed one never leaves the client.
	if _, err := dialClient(e, "beta", func(o *client.Options) { o.IID = "has space" }); err == nil {
		t.Fatal("malformed iid accepted")
	}
	// The same node may reconnect with its id; without one, each gets a fresh one.
	a2 := connect(t, e, "alpha", func(o *client.Options) { o.IID = "instance-1" })
	b1, b2 := connect(t, e, "beta"), connect(t, e, "gamma")
	if a2.IID() != "instance-1" || b1.IID() == "" || b1.IID() == b2.IID() {
		t.Fatalf("iids %q %q %q", a2.IID(), b1.IID(), b2.IID())
	}
	// A reconnection that re-announces takes over without a collision, and
	// the old connection's leaving does not remove the new record.
	ctx := ctxT(t, 5*time.Second)
	if _, err := a2.Announce(ctx, wire.Announcement{Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	a3 := connect(t, e, "alpha", func(o *client.Options) { o.IID = "instance-1" })
	if info, err := a3.Announce(ctx, wire.Announcement{Service: "svc"}); err != nil || info.Collision {
		t.Fatalf("re-announce after reconnect: %+v %v", info, err)
	}
	<-a2.Done()
	testbroker.Eventually(t, 5*time.Second, "one record", func() bool {
		list, err := b1.Whois(ctx, "svc")
		return err == nil && len(list) == 1 && list[0].Provenance.Epoch == a3.Epoch()
	})
}

// countingConn counts the bytes written that mention a marker.
type countingConn struct {
	net.Conn
	marker []byte
	hits   *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.marker) {
		c.hits.Add(1)
	}
	return c.Conn.Write(p)
}

// countingExecutor runs callbacks on a pool and counts them.
type countingExecutor struct {
	n  atomic.Int64
	wg sync.WaitGroup
}

func (x *countingExecutor) Execute(f func()) bool {
	x.n.Add(1)
	x.wg.Go(f)
	return true
}

// TestLoopbackRequest: a request a node makes to itself never leaves the
// client, and runs through its executor. One broker per transport: the
// broker is not involved.
func TestLoopbackRequest(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		var hits atomic.Int64
		exec := &countingExecutor{}
		t.Cleanup(exec.wg.Wait)
		alpha := connect(t, e, "alpha", func(o *client.Options) {
			dial := o.Dial
			o.Dial = func(ctx context.Context) (net.Conn, error) {
				var nc net.Conn
				var err error
				if dial != nil {
					nc, err = dial(ctx)
				} else {
					ep, perr := transport.ParseEndpoint(e.Endpoint)
					if perr != nil {
						return nil, perr
					}
					nc, err = transport.Dial(ctx, ep, e.ClientTLS)
				}
				if err != nil {
					return nil, err
				}
				return countingConn{Conn: nc, marker: []byte("loop."), hits: &hits}, nil
			}
			o.Executor = exec
		})
		ctx := ctxT(t, 5*time.Second)
		var calls atomic.Int64
		if _, err := alpha.Scope("s").Channel("loop.echo").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
			calls.Add(1)
			if m.From() != "alpha.bus" || m.Kind() != client.Request {
				return nil, fmt.Errorf("from %q kind %v", m.From(), m.Kind())
			}
			return append([]byte("echo:"), m.Payload()...), nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := alpha.Scope("s").Channel("loop.fail").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
			return nil, errors.New("nope")
		}); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		if _, err := alpha.Scope("s").Channel("loop.slow").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
			<-release // answers only after the caller's deadline
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		before := hits.Load() // the handle registrations mention the channels
		execBefore := exec.n.Load()
		ch := alpha.Scope("caller").Channel("loop.echo")
		for _, target := range []string{"alpha.bus", "svc.alpha.bus", "sub.svc.alpha.bus"} {
			m, err := ch.Request(ctx, target, []byte("hi"))
			if err != nil || string(m.Payload()) != "echo:hi" || m.From() != "alpha.bus" || m.Kind() != client.Reply {
				t.Fatalf("loopback to %s: %v", target, err)
			}
		}
		if _, err := alpha.Scope("caller").Channel("loop.fail").Request(ctx, "alpha.bus", nil); !errors.Is(err, client.ErrHandlerFailed) {
			t.Fatalf("failing handler: %v", err)
		}
		if _, err := alpha.Scope("caller").Channel("loop.none").Request(ctx, "alpha.bus", nil); !errors.Is(err, client.ErrNoHandler) {
			t.Fatalf("no handler: %v", err)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := alpha.Scope("caller").Channel("loop.slow").Request(short, "alpha.bus", nil); !errors.Is(err, client.ErrTimeout) {
			t.Fatalf("slow handler: %v", err)
		}
		if hits.Load() != before {
			t.Fatalf("a loopback request went over the wire (%d writes)", hits.Load()-before)
		}
		if calls.Load() != 3 || exec.n.Load()-execBefore != 5 {
			t.Fatalf("handler calls %d, executor tasks %d: loopback must go through the executor", calls.Load(), exec.n.Load()-execBefore)
		}
	})
}

// TestServiceWatchBufferEdge: a watch whose reader is behind holds
// ServiceWatchBuffer events; one more ends it with ErrWatchOverflow. One
// broker: the buffer is the client's.
func TestServiceWatchBufferEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	watcher := connect(t, e, "watcher")
	alpha := connect(t, e, "alpha")
	ctx := ctxT(t, 30*time.Second)
	w, err := watcher.WatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	announce := func(i int) {
		t.Helper()
		if _, err := alpha.Announce(ctx, wire.Announcement{Service: "svc", Version: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range client.ServiceWatchBuffer {
		announce(i) // one "up" event each
	}
	testbroker.Eventually(t, 10*time.Second, "a full buffer", func() bool { return len(w.Events()) == client.ServiceWatchBuffer })
	if err := w.Err(); err != nil {
		t.Fatalf("ended at the buffer's size: %v", err)
	}
	announce(client.ServiceWatchBuffer)
	testbroker.Eventually(t, 10*time.Second, "the overflow", func() bool { return errors.Is(w.Err(), client.ErrWatchOverflow) })
	n := 0
	for range w.Events() {
		n++
	}
	if n != client.ServiceWatchBuffer {
		t.Fatalf("%d events delivered before the end", n)
	}
}
