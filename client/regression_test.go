package client_test

// Regression tests for defects found in review; each failed before its fix.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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

// A Send with no target is refused: on the wire an event without "to" is a
// publication.
func TestRegressionSendEmptyTargetPublishes(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	var in inbox
	if _, err := a.Scope("s").Channel("orders.x").Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
		t.Fatal(err)
	}
	r, err := b.Scope("s").Channel("orders.x").Send(ctxT(t, 5*time.Second), "", []byte("p"))
	time.Sleep(200 * time.Millisecond)
	if !errors.Is(err, wire.ErrBadAddress) || in.len() != 0 {
		t.Fatalf("Send with an empty target: receipt %+v, %v, delivered to %d subscriber(s); want ErrBadAddress and no delivery", r, err, in.len())
	}
}

// Publications count against MaxInflight like sends and requests: past the
// limit one is refused and not dispatched.
func TestRegressionPublishIgnoresMaxInflight(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxInflight: 1})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "sink", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s1").WithBody([]byte("wide")))
	if m := r.Read(t); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("sub: %q", m)
	}
	p := connect(t, e, "pub")
	ch := p.Scope("s").Channel("wide")
	done := make(chan struct{})
	go func() { defer close(done); ch.Publish(ctxT(t, 3*time.Second), []byte("1")) }()
	defer func() { <-done }()
	if m := r.Read(t); m.Value(wire.HeaderCommand) != "wide" {
		t.Fatalf("first publication: %q", m)
	}
	// The limit is reached: a send is refused...
	if rc, _ := ch.Send(ctxT(t, 2*time.Second), "sink", nil); rc.Result != wire.Backpressured {
		t.Fatalf("send at the inflight limit: %+v", rc)
	}
	// ...but a second publication is dispatched anyway.
	go ch.Publish(ctxT(t, 1*time.Second), []byte("2"))
	_ = r.Conn.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
	for {
		m, err := r.R.ReadMessage()
		if err != nil {
			return // nothing dispatched: the limit held
		}
		if m.Value(wire.HeaderCommand) == "wide" {
			time.Sleep(1100 * time.Millisecond) // let the second Publish time out
			t.Fatalf("second publication dispatched although the connection is at MaxInflight=1: %q", m)
		}
	}
}

// A reply over MaxPayload is refused (by the handler's client and by the
// broker), not delivered.
func TestRegressionReplyPayloadNotLimited(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 1024})
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("big").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		return make([]byte, 64<<10), nil
	}); err != nil {
		t.Fatal(err)
	}
	reply, err := b.Scope("s").Channel("big").Request(ctxT(t, 5*time.Second), "alpha", nil)
	if err == nil {
		t.Fatalf("reply of %d bytes delivered past MaxPayload=1024", len(reply.Payload()))
	}
}

// Subscribers that join while the broker has not yet answered the
// channel's registration get its verdict too: a refusal reaches them all.
func TestRegressionConcurrentSubscribeReportsRefused(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts(),
		auth.Principal{Name: "deaf", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{Subscribe: []auth.Pattern{"ok"}}})
	d := connect(t, e, "deaf", func(o *client.Options) { o.Credential.Principal = "deaf" })
	for i := range 30 {
		name := fmt.Sprintf("denied.c%d", i)
		start := make(chan struct{})
		errs := make(chan error, 2)
		for j := range 2 {
			go func() {
				<-start
				_, err := d.Scope(fmt.Sprint("p", j)).Channel(name).Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {})
				errs <- err
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err == nil {
				t.Fatalf("attempt %d: Subscribe on %s returned nil although the node may not subscribe to it", i, name)
			}
		}
	}
}

// Client.Close revokes every scope's registrations, so callbacks still
// queued in the executor do not run after it.
func TestRegressionClientCloseRunsQueuedCallbacks(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a, err := dialClient(e, "alpha", func(o *client.Options) { o.Workers = 1 })
	if err != nil {
		t.Fatal(err)
	}
	b := connect(t, e, "beta")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var afterClose atomic.Int32
	var closing atomic.Bool
	if _, err := a.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) {
		if closing.Load() {
			afterClose.Add(1)
		}
		if string(m.Payload()) == "block" {
			entered <- struct{}{}
			<-release
		}
	}); err != nil {
		t.Fatal(err)
	}
	ch := b.Scope("s").Channel("ev")
	if r, _ := ch.Send(ctxT(t, 5*time.Second), "alpha", []byte("block")); r.Result != wire.Accepted {
		t.Fatal(r)
	}
	<-entered
	if r, _ := ch.Send(ctxT(t, 5*time.Second), "alpha", []byte("queued")); r.Result != wire.Accepted {
		t.Fatal(r)
	}
	closing.Store(true)
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	<-a.Done()
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	if n := afterClose.Load(); n != 0 {
		t.Fatalf("%d queued callback(s) ran after Client.Close closed every scope", n)
	}
}

// TestRegressionDirectoryUnboundedSubscriptions: one node may not register
// unboundedly many channels (MaxRegistrations), so it cannot make the
// directory too large for others; a directory over the payload limit is a
// typed refusal, not a silent timeout.
func TestRegressionDirectoryUnboundedSubscriptions(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxRegistrations: 100})
	victim := connect(t, e, "victim")
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "hostile", "local", e.Secrets["local"])
	pad := strings.Repeat("x", auth.MaxChannelLen-8)
	for i := range 101 {
		id := fmt.Sprint(i)
		r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, id).WithBody(fmt.Appendf(nil, "%s%08d", pad, i)))
		m := r.Read(t)
		want := "0"
		if i == 100 {
			want = "10" // past the limit
		}
		if m.Value(wire.HeaderRC) != want {
			t.Fatalf("registration %d: %q", i, m)
		}
	}
	// Re-subscribing to a held channel is not a new registration.
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "again").WithBody(fmt.Appendf(nil, "%s%08d", pad, 0)))
	if m := r.Read(t); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("re-subscribe: %q", m)
	}
	if _, err := victim.Directory(ctxT(t, 2*time.Second)); err != nil {
		t.Fatalf("Directory: %v", err)
	}
	// With a payload limit the directory does not fit, the answer says so.
	e2 := testbroker.Start(t, "unix", broker.Options{MaxPayload: 200})
	a := connect(t, e2, "alpha")
	connect(t, e2, "beta")
	connect(t, e2, "gamma")
	if _, err := a.Directory(ctxT(t, 2*time.Second)); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("oversize directory: %v", err)
	}
}

// The connection's writer may log while the handshake sets the node name
// (a peer that shut its read side makes bus.info fail). Run with -race.
func TestRegressionHandshakeNodeRace(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	path := strings.TrimPrefix(e.Endpoint, "unix://")
	body, _ := json.Marshal(wire.Hello{Node: "racer", Principal: "local", Secret: e.Secrets["local"]})
	hello, _ := wire.AppendFrame(nil, wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body))
	for range 100 {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		uc := nc.(*net.UnixConn)
		_ = uc.CloseRead() // the broker's writes now fail with EPIPE
		_, _ = uc.Write(hello)
		time.Sleep(10 * time.Millisecond)
		uc.Close()
	}
	testbroker.Eventually(t, 5*time.Second, "racers gone", func() bool { return len(e.Broker.Directory()) == 0 })
}

// The ACCEPTED receipt is queued before the callback can run, so a
// callback that closes the client (busbar sub --count 1) does not turn its
// own event into FAILED. A scheduling race: up to 800 attempts.
func TestRegressionReceiptLostWhenCallbackClosesClient(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	b := connect(t, e, "beta")
	deadline := time.Now().Add(6 * time.Second)
	for i := 0; i < 800 && time.Now().Before(deadline); i++ {
		node := fmt.Sprint("watcher-", i)
		a, err := dialClient(e, node)
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		if _, err := a.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {
			go func() { a.Close(); close(closed) }() // got my one message: exit
		}); err != nil {
			t.Fatal(err)
		}
		r, _ := b.Scope("s").Channel("news").Send(ctxT(t, 5*time.Second), node, nil)
		<-closed
		if r.Result != wire.Accepted {
			t.Fatalf("attempt %d: an event its subscriber handled got receipt %+v, want ACCEPTED", i, r)
		}
	}
}

// A handler cannot pass its failure off as the broker's: a result other
// than NO_HANDLER, OVERLOAD or HANDLER_FAILED on an error reply becomes
// HANDLER_FAILED, and a success reply carries none.
func TestRegressionHandlerCannotForgeErrorKind(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	b := connect(t, e, "beta")
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "forger", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdHandle).WithHeader(wire.HeaderID, "h").WithBody([]byte("rpc")))
	r.Read(t)
	res := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := b.Scope("s").Channel("rpc").Request(ctxT(t, 5*time.Second), "forger", nil)
			res <- err
		}()
	}
	for i := range 2 {
		req := r.Read(t)
		resp := wire.New(wire.TypeResponse, "rpc").WithHeader(wire.HeaderID, fmt.Sprint("r", i)).
			WithHeader(wire.HeaderReplyTo, req.Value(wire.HeaderID)).WithHeader(wire.HeaderResult, string(wire.ResultDisconnect))
		if i == 0 {
			resp.Set(wire.HeaderRC, "20")
		} else {
			resp.Set(wire.HeaderRC, "0")
		}
		r.Send(t, resp)
	}
	var failed, ok int
	for range 2 {
		err := <-res
		switch {
		case err == nil:
			ok++
		case errors.Is(err, client.ErrHandlerFailed):
			failed++
		default:
			t.Fatalf("forged kind got through: %v", err)
		}
	}
	if failed != 1 || ok != 1 {
		t.Fatalf("%d failed, %d ok", failed, ok)
	}
}

// A node cannot discard a sender's receipt by answering the event with a
// plain response: only a bus.receipt closes a send.
func TestRegressionWrongKindAnswerIsIgnored(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	b := connect(t, e, "beta")
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "sink", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte("ev")))
	r.Read(t)
	got := make(chan client.Receipt, 1)
	go func() { r, _ := b.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "sink", nil); got <- r }()
	ev := r.Read(t)
	r.Send(t, wire.New(wire.TypeResponse, "ev").WithHeader(wire.HeaderID, "x").WithHeader(wire.HeaderReplyTo, ev.Value(wire.HeaderID)))
	r.Send(t, wire.New(wire.TypeResponse, wire.CmdReceipt).WithHeader(wire.HeaderReplyTo, ev.Value(wire.HeaderID)).WithHeader(wire.HeaderResult, string(wire.Accepted)))
	if rc := <-got; rc.Result != wire.Accepted {
		t.Fatalf("receipt %+v", rc)
	}
}

// In-process connections do not count against MaxConnections: code
// embedded in the broker always gets in.
func TestRegressionInProcessExemptFromMaxConnections(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxConnections: 1})
	connect(t, e, "alpha")
	connect(t, e, e.Broker.Name(), func(o *client.Options) {
		o.Dial = func(context.Context) (net.Conn, error) { return e.Broker.DialInProcess() }
	})
}

// A client never hands its secret to a broker that speaks another protocol.
func TestRegressionNoSecretForIncompatibleBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hello := make(chan wire.Hello, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		w := wire.NewWriter(nc)
		info, _ := json.Marshal(wire.Info{Broker: "future", Protocol: "2", Nonce: []byte("n")})
		_ = w.WriteMessage(wire.New(wire.TypeEvent, wire.CmdInfo).WithBody(info))
		_ = w.Flush()
		m, err := wire.NewReader(nc).ReadMessage()
		var h wire.Hello
		if err == nil {
			_ = json.Unmarshal(m.Body(), &h)
		}
		hello <- h
	}()
	_, err = client.Connect(ctxT(t, 5*time.Second), client.Options{
		Server: "tcp://" + ln.Addr().String(), Node: "old", Credential: auth.Credential{Principal: "local", Secret: "s3cret"}})
	if !errors.Is(err, client.ErrIncompatible) {
		t.Fatalf("Connect = %v", err)
	}
	if h := <-hello; h.Secret != "" || h.Principal != "" || h.Node != "old" {
		t.Fatalf("hello to an incompatible broker: %+v", h)
	}
}
