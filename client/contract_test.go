package client_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestForgedSourceIsOverwritten: the broker derives "from" from the
// authenticated connection, whatever the client wrote.
func TestForgedSourceIsOverwritten(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha")
	var in inbox
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	if m := r.Hello(t, wire.ProtocolVersion, "mallory", "local", e.Secrets["local"]); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("hello: %q", m)
	}
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "e1").WithHeader(wire.HeaderTo, "alpha").
		WithHeader(wire.HeaderFrom, "alpha.bus"))
	if rc := r.Read(t); rc.Value(wire.HeaderResult) != string(wire.Accepted) || rc.Value(wire.HeaderReplyTo) != "e1" {
		t.Fatalf("receipt %q", rc)
	}
	testbroker.Eventually(t, 5*time.Second, "delivery", func() bool { return in.len() == 1 })
	if got := in.get(0).From(); got != "mallory.bus" {
		t.Fatalf("from = %q, want mallory.bus", got)
	}
	// A response that answers nobody's request is dropped, never delivered.
	r.Send(t, wire.New(wire.TypeResponse, "x").WithHeader(wire.HeaderID, "r1").WithHeader(wire.HeaderReplyTo, "not-open").WithHeader(wire.HeaderTo, "alpha"))
	testbroker.Eventually(t, 5*time.Second, "dropped reply counted", func() bool { return e.Broker.Stats().DroppedReplies >= 1 })
}

// TestMalformedAndOversizeFrames: the broker answers with an error frame,
// stays up, and other nodes are unaffected.
func TestMalformedAndOversizeFrames(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "mallory", "local", e.Secrets["local"])

	bad := []byte("---\nbad header\n---\n")
	r.SendBytes(t, append(binary.BigEndian.AppendUint32(nil, uint32(len(bad))), bad...))
	m := r.Read(t)
	if m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultMalformed) || !strings.Contains(m.Value(wire.HeaderError), "line 2") {
		t.Fatalf("malformed: %q", m)
	}
	// Still connected: a valid frame is still served.
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "e1").WithHeader(wire.HeaderTo, "alpha"))
	if m := r.Read(t); m.Value(wire.HeaderResult) != string(wire.NoSubscriber) {
		t.Fatalf("after malformed: %q", m)
	}
	// An event without an id cannot be answered: an error frame.
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderTo, "alpha"))
	if m := r.Read(t); m.Value(wire.HeaderResult) != string(wire.ResultMalformed) {
		t.Fatalf("no id: %q", m)
	}
	// Oversize: the broker says so and closes.
	r.SendBytes(t, binary.BigEndian.AppendUint32(nil, wire.MaxMessageBytes+1))
	m = r.Read(t)
	if m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) {
		t.Fatalf("oversize: %q", m)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("connection still open after an oversize frame")
	}
	// Others are unaffected.
	if _, err := b.Scope("s").Channel("echo").Request(ctxT(t, 5*time.Second), "alpha", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if s := e.Broker.Stats(); s.Malformed < 3 {
		t.Fatalf("malformed counted %d", s.Malformed)
	}
}

func echo(_ context.Context, m *client.Message) ([]byte, error) { return m.Payload(), nil }

// TestStalledHandlerDoesNotStallConnection: with the one worker stuck and
// the dispatch queue full, new work is refused (OVERLOAD, BACKPRESSURED)
// while the connection keeps serving.
func TestStalledHandlerDoesNotStallConnection(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1; o.DispatchQueue = 1 })
	b := connect(t, e, "beta")
	_, err := a.Scope("s").Channel("slow").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var in inbox
	if _, err := a.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
		t.Fatal(err)
	}
	bs := b.Scope("s")
	first := make(chan error, 1)
	go func() { _, err := bs.Channel("slow").Request(ctxT(t, 10*time.Second), "alpha", nil); first <- err }()
	<-started // the one worker is stuck
	if r, _ := bs.Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", nil); r.Result != wire.Accepted {
		t.Fatalf("event into the free queue slot: %+v", r)
	}
	if r, _ := bs.Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", nil); r.Result != wire.Backpressured {
		t.Fatalf("event into a full queue: %+v", r)
	}
	if _, err := bs.Channel("slow").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrOverload) {
		t.Fatalf("request into a full queue: %v", err)
	}
	// The connection itself still answers.
	if _, err := a.Directory(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "queued event delivered", func() bool { return in.len() == 1 })
}

// TestSlowReaderIsDisconnected: a node that stops reading cannot stall the
// broker or others: sends to it are BACKPRESSURED, then it is dropped as a
// slow consumer.
func TestSlowReaderIsDisconnected(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxQueueBytes: 256 << 10, MaxPayload: 64 << 10, WriteTimeout: time.Second})
	b := connect(t, e, "beta")
	c := connect(t, e, "gamma")
	if _, err := c.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "frozen", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s1").WithBody([]byte("flood")))
	r.Read(t) // subscribed; from now on it reads nothing
	// Flood it concurrently: kernel buffers and then the broker's bounded
	// queue fill, and the rest is refused.
	payload := make([]byte, 60<<10)
	const n = 64
	results := make(chan wire.Result, n)
	for range n {
		go func() {
			r, _ := b.Scope("s").Channel("flood").Send(ctxT(t, 3*time.Second), "frozen", payload)
			results <- r.Result
		}()
	}
	sawBackpressure := false
	for range n {
		sawBackpressure = sawBackpressure || <-results == wire.Backpressured
	}
	if !sawBackpressure {
		t.Fatal("never BACKPRESSURED")
	}
	// Others are served meanwhile.
	if _, err := b.Scope("s").Channel("echo").Request(ctxT(t, 5*time.Second), "gamma", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "slow consumer dropped", func() bool {
		return e.Broker.Stats().SlowConsumers == 1
	})
	testbroker.Eventually(t, 5*time.Second, "frozen gone from the directory", func() bool {
		for _, n := range e.Broker.Directory() {
			if n.Node == "frozen" {
				return false
			}
		}
		return true
	})
}

// TestScopeCloseIsIndependent: closing one plugin's scope revokes only its
// registrations and calls; its handles cannot start new work.
func TestScopeCloseIsIndependent(t *testing.T) {
	e := testbroker.Start(t, "inproc", testOpts())
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	p1, p2 := a.Scope("plugin-1"), a.Scope("plugin-2")
	var in1, in2 inbox
	if _, err := p1.Channel("ev").Subscribe(ctxT(t, 5*time.Second), in1.handler); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Channel("ev").Subscribe(ctxT(t, 5*time.Second), in2.handler); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Channel("rpc").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	// A call of p1 that is open when p1 closes fails with ErrScopeClosed.
	hang := make(chan struct{})
	defer close(hang)
	if _, err := b.Scope("s").Channel("hang").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		<-hang
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	openCall := make(chan error, 1)
	go func() { _, err := p1.Channel("hang").Request(ctxT(t, 10*time.Second), "beta", nil); openCall <- err }()
	time.Sleep(50 * time.Millisecond)
	p1.Close()
	if err := <-openCall; !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("open call: %v", err)
	}
	bs := b.Scope("s")
	if r, _ := bs.Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", []byte("1")); r.Result != wire.Accepted {
		t.Fatalf("send after p1 closed: %+v", r)
	}
	testbroker.Eventually(t, 5*time.Second, "p2 still receives", func() bool { return in2.len() == 1 })
	if in1.len() != 0 {
		t.Fatal("closed scope's subscriber ran")
	}
	if _, err := bs.Channel("rpc").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrNoHandler) {
		t.Fatalf("request to revoked handler: %v", err)
	}
	// Retained handles of p1 cannot create new work.
	ch := p1.Channel("ev")
	if _, err := ch.Subscribe(ctxT(t, 5*time.Second), in1.handler); !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if _, err := ch.Send(ctxT(t, 5*time.Second), "beta", nil); !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := ch.Publish(ctxT(t, 5*time.Second), nil); !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	// The channel can be handled again by another scope.
	if _, err := p2.Channel("rpc").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
}

// TestTimeoutIncludesQueueing: a request that waits in the dispatch queue
// past its deadline times out and is never handed to the handler.
func TestTimeoutIncludesQueueing(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1 })
	b := connect(t, e, "beta")
	release := make(chan struct{})
	var calls atomic.Int32
	_, err := a.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(_ context.Context, m *client.Message) ([]byte, error) {
		calls.Add(1)
		if string(m.Payload()) == "block" {
			<-release
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", []byte("block"))
		first <- err
	}()
	testbroker.Eventually(t, 5*time.Second, "worker busy", func() bool { return calls.Load() == 1 })
	start := time.Now()
	_, err = b.Scope("s").Channel("work").Request(ctxT(t, 200*time.Millisecond), "alpha", []byte("queued"))
	var re *client.RequestError
	if !errors.Is(err, client.ErrTimeout) || !errors.As(err, &re) || !re.Timeout() {
		t.Fatalf("queued request: %v", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("timeout took %v", waited)
	}
	time.Sleep(100 * time.Millisecond) // let the expired one reach the front
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times; the expired request must not be dispatched", n)
	}
}

// TestDisconnectWithoutReplay: a pending request fails when its handler's
// node goes away, and nothing is replayed when it comes back.
func TestDisconnectWithoutReplay(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	b := connect(t, e, "beta")
	a, err := dialClient(e, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	if _, err := a.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", nil)
		res <- err
	}()
	<-entered
	a.Close()
	if err := <-res; !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("pending request: %v", err)
	}
	if r, _ := b.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", nil); r.Result != wire.NotConnected {
		t.Fatalf("send while away: %+v", r)
	}
	var in inbox
	a2 := connect(t, e, "alpha")
	if _, err := a2.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if in.len() != 0 {
		t.Fatal("an event was replayed across connections")
	}
}

// TestReconnectIsolatesOldConnection: the same node name connecting again
// replaces the old connection (epoch+1); calls bound to the old one fail
// and its late answers never reach the new one.
func TestReconnectIsolatesOldConnection(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	b := connect(t, e, "beta")
	old := connect(t, e, "alpha")
	entered := make(chan struct{})
	if _, err := old.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		return []byte("late"), nil
	}); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", nil)
		res <- err
	}()
	<-entered
	fresh := connect(t, e, "alpha")
	if fresh.Epoch() != old.Epoch()+1 {
		t.Fatalf("epochs %d then %d", old.Epoch(), fresh.Epoch())
	}
	if err := <-res; !errors.Is(err, client.ErrDisconnect) {
		t.Fatalf("call bound to the old connection: %v", err)
	}
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("old connection not closed")
	}
	if !strings.Contains(old.Err().Error(), string(wire.ResultReplaced)) {
		t.Fatalf("old connection ended with %v", old.Err())
	}
	// The new connection has none of the old one's handlers.
	if _, err := b.Scope("s").Channel("work").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrNoHandler) {
		t.Fatalf("request to the new connection: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts(),
		auth.Principal{Name: "workers", Nodes: []auth.Pattern{"worker-*"}, Permissions: auth.AllPermissions()})
	cases := []struct {
		name string
		mod  func(*client.Options)
		node string
	}{
		{"wrong secret", func(o *client.Options) { o.Credential.Secret = "nope" }, "alpha"},
		{"unknown principal", func(o *client.Options) { o.Credential = auth.Credential{Principal: "ghost", Secret: "x"} }, "alpha"},
		{"node not allowed", func(o *client.Options) { o.Credential.Principal = "workers" }, "alpha"},
		{"broker's own name", nil, e.Broker.Name()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mods []func(*client.Options)
			if c.mod != nil {
				mods = append(mods, c.mod)
			}
			cl, err := dialClient(e, c.node, mods...)
			if !errors.Is(err, client.ErrAuth) {
				if cl != nil {
					cl.Close()
				}
				t.Fatalf("err = %v, want ErrAuth", err)
			}
		})
	}
	// Right credentials work, including a public key and a node pattern.
	connect(t, e, "worker-1", func(o *client.Options) { o.Credential.Principal = "workers" })
	connect(t, e, "signer", func(o *client.Options) {
		o.Credential = auth.Credential{Principal: "pk"}
		o.PrivateKey = e.Keys["pk"]
	})
	// Unknown principal and wrong secret look the same to the client.
	_, err1 := dialClient(e, "alpha", func(o *client.Options) { o.Credential.Secret = "nope" })
	_, err2 := dialClient(e, "alpha", func(o *client.Options) { o.Credential = auth.Credential{Principal: "ghost", Secret: "x"} })
	if err1.Error() != err2.Error() {
		t.Fatalf("distinguishable: %q vs %q", err1, err2)
	}
	if n := len(e.Broker.Directory()); n != 2 {
		t.Fatalf("%d nodes registered, want 2", n)
	}
}

func TestPermissions(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts(),
		auth.Principal{Name: "sender", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			Send: []auth.Pattern{"orders.>"}, Request: []auth.Pattern{"rpc.>"}, Subscribe: []auth.Pattern{"news"},
		}},
		auth.Principal{Name: "deaf", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			Subscribe: []auth.Pattern{"orders.created"}, Handle: []auth.Pattern{"rpc.ok"},
		}},
	)
	s := connect(t, e, "sender", func(o *client.Options) { o.Credential.Principal = "sender" })
	d := connect(t, e, "deaf", func(o *client.Options) { o.Credential.Principal = "deaf" })
	full := connect(t, e, "full")
	var in inbox
	for _, ch := range []string{"orders.created", "orders.other"} {
		if _, err := full.Scope("s").Channel(ch).Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := full.Scope("s").Channel("rpc.x").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Scope("s").Channel("orders.created").Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
		t.Fatal(err)
	}
	// Sending side.
	ss := s.Scope("s")
	if r, _ := ss.Channel("orders.created").Send(ctxT(t, 5*time.Second), "full", nil); r.Result != wire.Accepted {
		t.Fatalf("permitted send: %+v", r)
	}
	if r, _ := ss.Channel("billing.x").Send(ctxT(t, 5*time.Second), "full", nil); r.Result != wire.Rejected {
		t.Fatalf("forbidden send: %+v", r)
	}
	if _, err := ss.Channel("orders.created").Publish(ctxT(t, 5*time.Second), nil); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("forbidden publish: %v", err)
	}
	if _, err := ss.Channel("rpc.x").Request(ctxT(t, 5*time.Second), "full", nil); err != nil {
		t.Fatalf("permitted request: %v", err)
	}
	if _, err := ss.Channel("orders.created").Request(ctxT(t, 5*time.Second), "full", nil); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("forbidden request: %v", err)
	}
	// Receiving side, checked independently.
	if _, err := d.Scope("s").Channel("orders.other").Subscribe(ctxT(t, 5*time.Second), in.handler); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("forbidden subscribe: %v", err)
	}
	if _, err := d.Scope("s").Channel("rpc.x").Handle(ctxT(t, 5*time.Second), echo); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("forbidden handle: %v", err)
	}
	if r, _ := full.Scope("s").Channel("orders.other").Send(ctxT(t, 5*time.Second), "deaf", nil); r.Result != wire.Rejected {
		t.Fatalf("send to a node that may not receive: %+v", r)
	}
	// Publish candidates are the nodes permitted to receive: not "deaf" for orders.other.
	res, err := full.Scope("s").Channel("orders.other").Publish(ctxT(t, 5*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Results {
		if r.Node == "deaf" || r.Node == "sender" {
			t.Fatalf("unauthorised candidate in %v", res.Results)
		}
	}
	if e.Broker.Stats().Refused < 6 {
		t.Fatalf("refusals counted: %d", e.Broker.Stats().Refused)
	}
}

func TestIncompatibleVersion(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	r := e.DialRaw(t)
	if r.Info.Protocol != wire.ProtocolVersion {
		t.Fatalf("broker announces %q", r.Info.Protocol)
	}
	m := r.Hello(t, "2", "future", "local", e.Secrets["local"])
	if m.Value(wire.HeaderResult) != string(wire.ResultVersion) || !strings.Contains(m.Value(wire.HeaderError), `"2"`) {
		t.Fatalf("answer %q", m)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("connection left open")
	}
	if len(e.Broker.Directory()) != 0 {
		t.Fatal("incompatible peer registered")
	}
}

func TestLeaseExpiry(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "silent", "local", e.Secrets["local"])
	// A real client keeps its lease with heartbeats.
	live := connect(t, e, "live")
	start := time.Now()
	testbroker.Eventually(t, 5*time.Second, "silent node dropped", func() bool { return len(e.Broker.Directory()) == 1 })
	if took := time.Since(start); took > 300*time.Millisecond+2*time.Second {
		t.Fatalf("dead peer detected after %v", took)
	}
	time.Sleep(500 * time.Millisecond)
	if d := e.Broker.Directory(); len(d) != 1 || d[0].Node != "live" {
		t.Fatalf("directory %+v", d)
	}
	if live.Err() != nil {
		t.Fatal(live.Err())
	}
	if e.Broker.Stats().LeaseExpired != 1 {
		t.Fatal("lease expiry not counted")
	}
}
