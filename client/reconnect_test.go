package client_test

// Reconnecting (docs/client.md#reconnecting): a client with MaxReconnects
// set survives its broker — stopped and started again on the same
// address, or replaced by another in its server list — restores what it
// had registered, resyncs its watches, and fails what was in flight.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/transport"
	"busbar/wire"
)

// restartable is a broker on a fixed Unix socket, with its state file,
// that a test stops and starts again; its principals are env's.
type restartable struct {
	t      *testing.T
	env    *testbroker.Env
	store  *auth.Store // when set, the principals of the next start instead of env's
	name   string
	path   string
	state  string
	relay  string // the relay's directory, kept across restarts
	b      *broker.Broker
	served chan error
}

func newRestartable(t *testing.T, env *testbroker.Env, name string) *restartable {
	dir := t.TempDir()
	r := &restartable{t: t, env: env, name: name, path: filepath.Join(dir, "b.sock"), state: filepath.Join(dir, "state.db"), relay: filepath.Join(dir, "relay")}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) endpoint() string { return "unix://" + r.path }

func (r *restartable) start() {
	r.t.Helper()
	store := r.env.Store
	if r.store != nil {
		store = r.store
	}
	b, err := broker.New(broker.Options{Name: r.name, Auth: store, StatePath: r.state, RelayDir: r.relay})
	if err != nil {
		r.t.Fatal(err)
	}
	ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: r.path}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.b, r.served = b, make(chan error, 1)
	go func() { r.served <- b.Serve(ln) }()
}

func (r *restartable) stop() {
	if r.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.b.Shutdown(ctx); err != nil {
		r.t.Errorf("shutdown %s: %v", r.name, err)
	}
	<-r.served
	r.b = nil
}

// connEvents records a client's connection events.
type connEvents struct{ ch chan client.ConnEvent }

func newConnEvents() *connEvents { return &connEvents{ch: make(chan client.ConnEvent, 64)} }

func (e *connEvents) record(ev client.ConnEvent) { e.ch <- ev }

// next waits for the next event and checks its kind.
func (e *connEvents) next(t *testing.T, kind client.ConnEventKind) client.ConnEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		if ev.Kind != kind {
			t.Fatalf("event %+v, want %s", ev, kind)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s event", kind)
	}
	return client.ConnEvent{}
}

// reconnecting sets the options of a client that never gives up, with
// short waits, reporting to ev.
func reconnecting(ev *connEvents) func(*client.Options) {
	return func(o *client.Options) {
		o.MaxReconnects = client.ReconnectForever
		o.ReconnectWaitMin, o.ReconnectWaitMax = 5*time.Millisecond, 50*time.Millisecond
		o.OnConnEvent = ev.record
	}
}

// link dials through connections the test can cut; while cut, dials wait
// (within their context) until it is mended.
type link struct {
	target func(context.Context) (net.Conn, error)
	dials  atomic.Int32

	mu    sync.Mutex
	open  chan struct{} // closed while dials may go through
	conns []net.Conn
}

func newLink(target func(context.Context) (net.Conn, error)) *link {
	l := &link{target: target, open: make(chan struct{})}
	close(l.open)
	return l
}

func (l *link) dial(ctx context.Context) (net.Conn, error) {
	l.dials.Add(1)
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	nc, err := l.target(ctx)
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, nc)
		l.mu.Unlock()
	}
	return nc, err
}

// cut closes every connection made and holds new dials.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open = make(chan struct{})
	for _, nc := range l.conns {
		_ = nc.Close()
	}
	l.conns = nil
}

func (l *link) mend() {
	l.mu.Lock()
	close(l.open)
	l.mu.Unlock()
}

func viaLink(l *link) func(*client.Options) {
	return func(o *client.Options) { o.Dial = l.dial }
}

// TestReconnectRestoresRegistrationsAfterBrokerRestart: the broker stops
// and starts again on the same address; the client reconnects as the same
// instance and its subscriptions, handler and announcement work again.
func TestReconnectRestoresRegistrationsAfterBrokerRestart(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	r := newRestartable(t, env, "broker-a")
	ev := newConnEvents()
	at := func(o *client.Options) { o.Server = r.endpoint() }
	l := connect(t, env, "listener", at, reconnecting(ev))
	var in inbox
	ch := l.Scope("app").Channel("news")
	if _, err := ch.Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Scope("app").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Announce(ctxT(t, 5*time.Second), wire.Announcement{Service: "newsdesk", Channels: []string{"echo"}}); err != nil {
		t.Fatal(err)
	}
	iid := l.IID()

	r.stop()
	if got := ev.next(t, client.Disconnected); got.Server != r.endpoint() || !errors.Is(got.Err, client.ErrDisconnect) {
		t.Fatalf("disconnected event %+v", got)
	}
	if l.Connected() || l.Err() != nil {
		t.Fatalf("while reconnecting: connected %v, err %v", l.Connected(), l.Err())
	}
	r.start()
	if got := ev.next(t, client.Reconnected); got.Err != nil || got.Broker != "broker-a" || got.Attempts < 1 {
		t.Fatalf("reconnected event %+v", got)
	}
	if l.IID() != iid {
		t.Fatalf("IID %q after reconnecting, was %q", l.IID(), iid)
	}

	s := connect(t, env, "sender", at)
	sch := s.Scope("app")
	if rcpt, err := sch.Channel("news").Send(ctxT(t, 5*time.Second), "listener", []byte("after")); err != nil || rcpt.Result != wire.Accepted {
		t.Fatalf("send after restart: %+v %v", rcpt, err)
	}
	testbroker.Eventually(t, 5*time.Second, "the event arrives", func() bool { return in.Len() == 1 })
	if reply, err := sch.Channel("echo").Request(ctxT(t, 5*time.Second), "listener", []byte("ping")); err != nil || string(reply.Payload()) != "ping" {
		t.Fatalf("request after restart: %v %v", reply, err)
	}
	svcs, err := s.Whois(ctxT(t, 5*time.Second), "newsdesk")
	if err != nil || len(svcs) != 1 || svcs[0].IID != iid {
		t.Fatalf("whois after restart: %+v %v", svcs, err)
	}
}

// TestReconnectFailsOverToTheNextServer: with two brokers in its list, a
// client whose broker stops moves to the other; a new client given the
// same list skips the dead one.
func TestReconnectFailsOverToTheNextServer(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	a, b := newRestartable(t, env, "broker-a"), newRestartable(t, env, "broker-b")
	both := func(o *client.Options) { o.Server = a.endpoint() + "," + b.endpoint() }
	ev := newConnEvents()
	l := connect(t, env, "listener", both, reconnecting(ev))
	if l.Broker() != "broker-a" {
		t.Fatalf("connected to %s, want the first server", l.Broker())
	}
	if _, err := l.Scope("app").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	a.stop()
	ev.next(t, client.Disconnected)
	if got := ev.next(t, client.Reconnected); got.Server != b.endpoint() || got.Broker != "broker-b" || got.Err != nil {
		t.Fatalf("reconnected event %+v", got)
	}
	s := connect(t, env, "sender", both)
	if s.Broker() != "broker-b" {
		t.Fatalf("sender connected to %s", s.Broker())
	}
	if reply, err := s.Scope("app").Channel("echo").Request(ctxT(t, 5*time.Second), "listener", []byte("x")); err != nil || string(reply.Payload()) != "x" {
		t.Fatalf("request on the second broker: %v %v", reply, err)
	}
}

// TestInFlightCallFailsWithDisconnectAndIsNotReplayed: a request waiting
// when the connection drops fails with DISCONNECT; after the reconnect
// the handler has still run once.
func TestInFlightCallFailsWithDisconnectAndIsNotReplayed(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	var runs atomic.Int32
	release := make(chan struct{})
	h := connect(t, env, "handler")
	if _, err := h.Scope("app").Channel("slow").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Scope("app").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	ev := newConnEvents()
	ln := newLink(env.Dial)
	c := connect(t, env, "caller", viaLink(ln), reconnecting(ev))
	ch := c.Scope("app")
	failed := make(chan error, 1)
	go func() {
		_, err := ch.Channel("slow").Request(ctxT(t, 20*time.Second), "handler", nil)
		failed <- err
	}()
	testbroker.Eventually(t, 5*time.Second, "the handler runs", func() bool { return runs.Load() == 1 })
	ln.cut()
	err := <-failed
	var re *client.RequestError
	if !errors.As(err, &re) || re.Kind != wire.ResultDisconnect || !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("in-flight request = %v, want DISCONNECT", err)
	}
	ev.next(t, client.Disconnected)
	ln.mend()
	ev.next(t, client.Reconnected)
	close(release)
	if reply, err := ch.Channel("echo").Request(ctxT(t, 5*time.Second), "handler", []byte("y")); err != nil || string(reply.Payload()) != "y" {
		t.Fatalf("request after reconnecting: %v %v", reply, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1 (never replayed)", n)
	}
}

// TestCallsWhileReconnectingWaitWithinTheirDeadline: a call made while
// the client reconnects waits for the connection; one whose deadline
// passes first fails as a timeout, having sent nothing.
func TestCallsWhileReconnectingWaitWithinTheirDeadline(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	h := connect(t, env, "handler")
	if _, err := h.Scope("app").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	ev := newConnEvents()
	ln := newLink(env.Dial)
	c := connect(t, env, "caller", viaLink(ln), reconnecting(ev))
	ch := c.Scope("app").Channel("echo")
	ln.cut()
	ev.next(t, client.Disconnected)

	_, err := ch.Request(ctxT(t, 50*time.Millisecond), "handler", []byte("early"))
	var re *client.RequestError
	if !errors.As(err, &re) || re.Kind != wire.ResultTimeout || !strings.Contains(re.Text, "not connected") {
		t.Fatalf("request while disconnected = %v, want TIMEOUT (not connected)", err)
	}
	rcpt, err := ch.Send(ctxT(t, 50*time.Millisecond), "handler", nil)
	if err != nil || rcpt.Result != wire.TimedOut || !strings.Contains(rcpt.Reason, "not connected") {
		t.Fatalf("send while disconnected = %+v %v", rcpt, err)
	}

	answered := make(chan error, 1)
	go func() {
		reply, err := ch.Request(ctxT(t, 20*time.Second), "handler", []byte("waited"))
		if err == nil && string(reply.Payload()) != "waited" {
			err = errors.New("wrong reply " + string(reply.Payload()))
		}
		answered <- err
	}()
	if c.Connected() {
		t.Fatal("connected while the link is cut")
	}
	ln.mend()
	if err := <-answered; err != nil {
		t.Fatalf("request made while reconnecting: %v", err)
	}
	ev.next(t, client.Reconnected)
}

// TestStateWatchResyncsAcrossBrokerRestart: a watcher cut off while keys
// change, and the broker restarts meanwhile, gets each key's latest value
// once when it reconnects, then follows the new broker's changes.
func TestStateWatchResyncsAcrossBrokerRestart(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	r := newRestartable(t, env, "broker-a")
	at := func(o *client.Options) { o.Server = r.endpoint() }
	ln := newLink(func(ctx context.Context) (net.Conn, error) {
		return transport.Dial(ctx, transport.Endpoint{Scheme: transport.SchemeUnix, Address: r.path}, nil)
	})
	ev := newConnEvents()
	w := connect(t, env, "watcher", viaLink(ln), reconnecting(ev))
	writer := connect(t, env, "writer", at)
	ns := writer.State("cfg")
	if _, err := ns.Set(ctxT(t, 5*time.Second), "k", 1); err != nil {
		t.Fatal(err)
	}
	watch, err := w.State("cfg").Watch(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := watch.Initial().Entries; len(got) != 1 || string(got[0].Value) != "1" {
		t.Fatalf("initial %+v", got)
	}
	ln.cut()
	ev.next(t, client.Disconnected)
	for _, kv := range []struct {
		k string
		v int
	}{{"k", 2}, {"j", 1}} {
		if _, err := ns.Set(ctxT(t, 5*time.Second), kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	writer.Close()
	r.stop()
	r.start()
	writer = connect(t, env, "writer", at)
	ns = writer.State("cfg")
	if _, err := ns.Set(ctxT(t, 5*time.Second), "j", 2); err != nil {
		t.Fatal(err)
	}
	ln.mend()
	ev.next(t, client.Reconnected)
	got := map[string]string{}
	for len(got) < 2 {
		e := nextChange(t, watch)
		if _, dup := got[e.Key]; dup {
			t.Fatalf("key %s delivered twice (%s)", e.Key, e.Value)
		}
		got[e.Key] = string(e.Value)
	}
	if got["k"] != "2" || got["j"] != "2" {
		t.Fatalf("resync delivered %v, want k=2 j=2", got)
	}
	if _, err := ns.Set(ctxT(t, 5*time.Second), "k", 3); err != nil {
		t.Fatal(err)
	}
	if e := nextChange(t, watch); e.Key != "k" || string(e.Value) != "3" {
		t.Fatalf("after the resync: %+v", e)
	}
}

// TestServiceWatchResyncsAfterReconnect: what changed in the registry
// while the watcher was cut off arrives as events when it reconnects.
func TestServiceWatchResyncsAfterReconnect(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	x := connect(t, env, "x")
	if _, err := x.Announce(ctxT(t, 5*time.Second), wire.Announcement{Service: "alpha"}); err != nil {
		t.Fatal(err)
	}
	ev := newConnEvents()
	ln := newLink(env.Dial)
	w := connect(t, env, "watcher", viaLink(ln), reconnecting(ev))
	watch, err := w.WatchServices(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := watch.Initial(); len(got) != 1 || got[0].Service != "alpha" {
		t.Fatalf("initial %+v", got)
	}
	ln.cut()
	ev.next(t, client.Disconnected)
	x.Close()
	y := connect(t, env, "y")
	if _, err := y.Announce(ctxT(t, 5*time.Second), wire.Announcement{Service: "beta"}); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "alpha leaves the registry", func() bool {
		s, err := y.Whois(ctxT(t, 5*time.Second), "alpha")
		return err == nil && len(s) == 0
	})
	ln.mend()
	ev.next(t, client.Reconnected)
	for _, want := range []wire.ServiceEvent{{Op: wire.ServiceDown, Service: wire.ServiceInfo{Address: "alpha.x.bus"}}, {Op: wire.ServiceUp, Service: wire.ServiceInfo{Address: "beta.y.bus"}}} {
		select {
		case got := <-watch.Events():
			if got.Op != want.Op || got.Service.Address != want.Service.Address {
				t.Fatalf("event %+v, want %s %s", got, want.Op, want.Service.Address)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event", want.Op)
		}
	}
}

// TestReconnectGivesUpAfterMaxReconnects: MaxReconnects dials per outage,
// and not one more; then the client ends with DISCONNECT. NoReconnect
// makes none; 0, the default, DefaultMaxReconnects.
func TestReconnectGivesUpAfterMaxReconnects(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	for _, tc := range []struct{ set, attempts int }{
		{client.NoReconnect, 0}, {1, 1}, {3, 3}, {0, client.DefaultMaxReconnects},
	} {
		max := tc.attempts
		var dials atomic.Int32
		var first net.Conn
		ev := newConnEvents()
		c, err := dialClient(env, "n", reconnecting(ev), func(o *client.Options) {
			o.MaxReconnects = tc.set
			// The waits between passes, short: the default's 60 attempts
			// would otherwise take about two minutes.
			o.ReconnectWaitMin, o.ReconnectWaitMax = time.Microsecond, time.Microsecond
			o.Dial = func(ctx context.Context) (net.Conn, error) {
				if dials.Add(1) > 1 {
					return nil, errors.New("broker unreachable")
				}
				nc, err := env.Dial(ctx)
				first = nc
				return nc, err
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = first.Close()
		if max > 0 {
			ev.next(t, client.Disconnected)
		}
		if got := ev.next(t, client.Closed); !errors.Is(got.Err, client.ErrDisconnect) {
			t.Fatalf("max %d: closed with %v", max, got.Err)
		}
		<-c.Done()
		if !errors.Is(c.Err(), client.ErrDisconnect) {
			t.Fatalf("max %d: Err %v", max, c.Err())
		}
		if n := dials.Load() - 1; n != int32(max) {
			t.Fatalf("max %d: %d reconnect attempts", max, n)
		}
		c.Close()
	}
}

// TestMaxReconnectsBelowNoReconnectIsRefused: MaxReconnects is a count,
// ReconnectForever or NoReconnect; anything further below is refused by
// Connect, NoReconnect itself accepted.
func TestMaxReconnectsBelowNoReconnectIsRefused(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	_, err := dialClient(env, "n", func(o *client.Options) { o.MaxReconnects = client.NoReconnect - 1 })
	if err == nil || !strings.Contains(err.Error(), "MaxReconnects -3") {
		t.Fatalf("MaxReconnects -3: %v", err)
	}
	c, err := dialClient(env, "n", func(o *client.Options) { o.MaxReconnects = client.NoReconnect })
	if err != nil {
		t.Fatalf("NoReconnect: %v", err)
	}
	c.Close()
}

// TestCloseDuringReconnect: Close stops a reconnect under way and leaves
// no goroutine behind (TestMain checks).
func TestCloseDuringReconnect(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	ev := newConnEvents()
	ln := newLink(env.Dial)
	c, err := dialClient(env, "n", viaLink(ln), reconnecting(ev))
	if err != nil {
		t.Fatal(err)
	}
	ln.cut()
	ev.next(t, client.Disconnected)
	testbroker.Eventually(t, 5*time.Second, "a dial waits on the cut link", func() bool { return ln.dials.Load() >= 2 })
	c.Close()
	if got := ev.next(t, client.Closed); !errors.Is(got.Err, client.ErrClosed) {
		t.Fatalf("closed with %v", got.Err)
	}
	if _, err := c.Scope("s").Channel("x").Request(ctxT(t, time.Second), "n", nil); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("request after Close: %v", err)
	}
}

// TestReplacedConnectionIsNotTakenBack: when another connection of the
// same node replaces this one, the client ends rather than reconnect (the
// two would replace each other in turn).
func TestReplacedConnectionIsNotTakenBack(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	ev := newConnEvents()
	ln := newLink(env.Dial)
	old := connect(t, env, "dup", viaLink(ln), reconnecting(ev))
	connect(t, env, "dup")
	if got := ev.next(t, client.Closed); !strings.Contains(got.Err.Error(), string(wire.ResultReplaced)) {
		t.Fatalf("closed with %v", got.Err)
	}
	<-old.Done()
	if n := ln.dials.Load(); n != 1 {
		t.Fatalf("%d dials, want 1 (no reconnect)", n)
	}
}

// TestStateWatchFollowsTheNextBrokersNumbering: after failing over to a
// broker whose namespace numbering is behind the first's, the watch takes
// that broker's snapshot and then every change it makes.
func TestStateWatchFollowsTheNextBrokersNumbering(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	a, b := newRestartable(t, env, "broker-a"), newRestartable(t, env, "broker-b")
	ev := newConnEvents()
	w := connect(t, env, "watcher", func(o *client.Options) { o.Server = a.endpoint() + "," + b.endpoint() }, reconnecting(ev))
	onA := connect(t, env, "writer", func(o *client.Options) { o.Server = a.endpoint() })
	for i := range 5 {
		if _, err := onA.State("cfg").Set(ctxT(t, 5*time.Second), "k", i); err != nil {
			t.Fatal(err)
		}
	}
	watch, err := w.State("cfg").Watch(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	onA.Close()
	a.stop()
	ev.next(t, client.Disconnected)
	ev.next(t, client.Reconnected)
	onB := connect(t, env, "writer", func(o *client.Options) { o.Server = b.endpoint() })
	for _, v := range []string{`"b1"`, `"b2"`} {
		if _, err := onB.State("cfg").Set(ctxT(t, 5*time.Second), "k", json.RawMessage(v)); err != nil {
			t.Fatal(err)
		}
		if e := nextChange(t, watch); string(e.Value) != v {
			t.Fatalf("change %s, want %s", e.Value, v)
		}
	}
}

// TestReconnectReportsWhatTheBrokerRefusedToRestore: a broker that comes
// back with narrower permissions refuses one subscription; the
// reconnected event names it, and the rest is restored.
func TestReconnectReportsWhatTheBrokerRefusedToRestore(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	r := newRestartable(t, env, "broker-a")
	ev := newConnEvents()
	l := connect(t, env, "listener", func(o *client.Options) { o.Server = r.endpoint() }, reconnecting(ev))
	var news, sports inbox
	for name, in := range map[string]*inbox{"news": &news, "sports": &sports} {
		if _, err := l.Scope("app").Channel(name).Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
			t.Fatal(err)
		}
	}
	narrower := auth.AllPermissions()
	narrower.Subscribe = []auth.Pattern{"sports"}
	store, err := auth.NewStore([]auth.Principal{{Name: "local", SecretHash: auth.HashSecret(env.Secrets["local"]), Nodes: []auth.Pattern{"*"}, Permissions: narrower}})
	if err != nil {
		t.Fatal(err)
	}
	r.stop()
	ev.next(t, client.Disconnected)
	r.store = store
	r.start()
	got := ev.next(t, client.Reconnected)
	if !errors.Is(got.Err, client.ErrRejected) || !strings.Contains(got.Err.Error(), "subscribe news") || strings.Contains(got.Err.Error(), "sports") {
		t.Fatalf("reconnected with %v, want news refused and nothing else", got.Err)
	}
	s := connect(t, env, "sender", func(o *client.Options) { o.Server = r.endpoint() })
	if rcpt, err := s.Scope("app").Channel("sports").Send(ctxT(t, 5*time.Second), "listener", nil); err != nil || rcpt.Result != wire.Accepted {
		t.Fatalf("send to the restored subscription: %+v %v", rcpt, err)
	}
}

// TestWorkStartedWhileReconnectingWaitsForTheConnection: a Subscribe and
// an Emit made while the client has no connection wait for it and go out
// on it; the subscription is registered once and receives.
func TestWorkStartedWhileReconnectingWaitsForTheConnection(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	ev := newConnEvents()
	ln := newLink(env.Dial)
	c := connect(t, env, "node", viaLink(ln), reconnecting(ev))
	ln.cut()
	ev.next(t, client.Disconnected)
	var in inbox
	subscribed := make(chan error, 1)
	go func() {
		_, err := c.Scope("app").Channel("ticks").Subscribe(ctxT(t, 20*time.Second), in.Handler)
		subscribed <- err
	}()
	emitted := make(chan error, 1)
	go func() { emitted <- c.Scope("app").Channel("ticks").Emit(ctxT(t, 20*time.Second), []byte("t1")) }()
	ln.mend()
	if err := <-subscribed; err != nil {
		t.Fatalf("subscribe made while reconnecting: %v", err)
	}
	if err := <-emitted; err != nil {
		t.Fatalf("emit made while reconnecting: %v", err)
	}
	ev.next(t, client.Reconnected)
	s := connect(t, env, "sender")
	if err := s.Scope("app").Channel("ticks").Emit(ctxT(t, 5*time.Second), []byte("t2")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "t2 arrives", func() bool {
		for i := range in.Len() {
			if string(in.Get(i).Payload()) == "t2" {
				return true
			}
		}
		return false
	})
	dir, err := s.Directory(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range dir {
		if n.Node == "node" && len(n.Subscriptions) != 1 {
			t.Fatalf("node's subscriptions after the reconnect: %v", n.Subscriptions)
		}
	}
}

// TestReconnectAttemptEndsAtTheHandshakeTimeout: a reconnect attempt to a
// peer that accepts and never speaks fails at HandshakeTimeout, and the
// next attempt starts; the last one's error is the client's.
func TestReconnectAttemptEndsAtTheHandshakeTimeout(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	var dials atomic.Int32
	var first net.Conn
	var mute []net.Conn // the peers' ends, kept open and silent
	ev := newConnEvents()
	c, err := dialClient(env, "n", reconnecting(ev), func(o *client.Options) {
		o.MaxReconnects = 2
		o.HandshakeTimeout = 50 * time.Millisecond
		o.Dial = func(ctx context.Context) (net.Conn, error) {
			if dials.Add(1) == 1 {
				nc, err := env.Dial(ctx)
				first = nc
				return nc, err
			}
			ours, theirs := net.Pipe()
			mute = append(mute, theirs)
			return ours, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = first.Close()
	ev.next(t, client.Disconnected)
	got := ev.next(t, client.Closed)
	text := got.Err.Error()
	if !errors.Is(got.Err, client.ErrDisconnect) || !strings.Contains(text, "broker info") || !strings.Contains(text, "deadline") && !strings.Contains(text, "timeout") {
		t.Fatalf("closed with %v, want the handshake's timeout", got.Err)
	}
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d dials, want 3", n)
	}
	for _, nc := range mute {
		_ = nc.Close()
	}
}
