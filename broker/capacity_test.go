package broker_test

// Per-connection capacity: how many connections the broker serves, how
// many calls one connection may have open (MaxInflight) and how many
// channels it may register (MaxRegistrations).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestMaxConnectionsEdge: MaxConnections connections are served; one more
// is closed at once and counted (Stats.OverCapacity).
func TestMaxConnectionsEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxConnections: 2})
	connect(t, e, "alpha")
	connect(t, e, "beta") // at the limit
	if _, err := dialClient(e, "gamma", noRetry); err == nil {
		t.Fatal("a third connection was served")
	}
	if e.Broker.Stats().OverCapacity != 1 {
		t.Fatal("refusal not counted")
	}
}

// TestInProcessExemptFromMaxConnections: in-process connections do not
// count against MaxConnections: code embedded in the broker always gets in.
// (The broker's own endpoint used to be refused at capacity.)
func TestInProcessExemptFromMaxConnections(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxConnections: 1})
	connect(t, e, "alpha")
	connect(t, e, e.Broker.Name(), func(o *client.Options) {
		o.Dial = func(context.Context) (net.Conn, error) { return e.Broker.DialInProcess() }
	})
}

func TestMaxInflightEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxInflight: 2})
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 4 })
	b := connect(t, e, "beta")
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	if _, err := a.Scope("s").Channel("hang").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := b.Scope("s").Channel("hang").Request(ctxT(t, 10*time.Second), "alpha", nil)
			errs <- err
		}()
	}
	<-entered
	<-entered // two calls open: the limit
	_, err := b.Scope("s").Channel("hang").Request(ctxT(t, 5*time.Second), "alpha", nil)
	if !errors.Is(err, client.ErrOverload) {
		t.Fatalf("third call: %v", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Below the limit again.
	if _, err := b.Scope("s").Channel("hang").Request(ctxT(t, 5*time.Second), "alpha", nil); err != nil {
		t.Fatal(err)
	}
}

// TestMaxInflightCountsPublications: publications count against
// MaxInflight like sends and requests: past the limit one is refused
// (OVERLOAD) and nothing is dispatched.
// (A publication used to be dispatched whatever the connection's open calls.)
func TestMaxInflightCountsPublications(t *testing.T) {
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
	first := r.Read(t)
	if first.Value(wire.HeaderCommand) != "wide" {
		t.Fatalf("first publication: %q", first)
	}
	// The limit is reached (the sink holds the first publication's
	// receipt): a send is refused...
	if rc, _ := ch.Send(ctxT(t, 2*time.Second), "sink", nil); rc.Result != wire.Backpressured {
		t.Fatalf("send at the inflight limit: %+v", rc)
	}
	// ...and so is a second publication.
	if _, err := ch.Publish(ctxT(t, 2*time.Second), []byte("2")); !errors.Is(err, client.ErrOverload) {
		t.Fatalf("second publication at the inflight limit: %v", err)
	}
	// A marker from another node reaches the sink behind anything the
	// second publication dispatched.
	other := connect(t, e, "other")
	marked := make(chan client.Receipt, 1)
	go func() {
		r, _ := other.Scope("s").Channel("wide").Send(ctxT(t, 5*time.Second), "sink", []byte("marker"))
		marked <- r
	}()
	m := r.Read(t)
	if string(m.Body()) != "marker" {
		t.Fatalf("second publication dispatched although the connection is at MaxInflight=1: %q", m)
	}
	for _, ev := range []*wire.Message{m, first} {
		r.Send(t, wire.New(wire.TypeResponse, wire.CmdReceipt).WithHeader(wire.HeaderReplyTo, ev.Value(wire.HeaderID)).WithHeader(wire.HeaderResult, string(wire.Accepted)))
	}
	if rc := <-marked; rc.Result != wire.Accepted {
		t.Fatalf("marker: %+v", rc)
	}
}

// TestMaxRegistrationsKeepsDirectoryBounded: one node may not register
// unboundedly many channels (MaxRegistrations), so it cannot make the
// directory too large for others; a directory over the broker's answer
// limit is a typed refusal.
// (Registrations used to be unbounded, and an oversize directory a silent
// timeout.)
func TestMaxRegistrationsKeepsDirectoryBounded(t *testing.T) {
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
	// An answer may be larger than MaxPayload (which bounds what nodes
	// send), up to what the asker's queue holds: a directory of 200 bytes
	// past a payload limit of 200 is answered; one past the answer limit
	// is a typed refusal that names the limit.
	e2 := testbroker.Start(t, "unix", broker.Options{MaxPayload: 200, MaxQueueBytes: broker.MaxFrameOverhead + 2048})
	a := connect(t, e2, "alpha")
	connect(t, e2, "beta")
	connect(t, e2, "gamma")
	if dir, err := a.Directory(ctxT(t, 2*time.Second)); err != nil || len(dir) != 3 {
		t.Fatalf("a directory over MaxPayload: %v %v", dir, err)
	}
	for i := range 20 {
		if _, err := a.Scope("s").Channel(fmt.Sprintf("%s%02d", strings.Repeat("c", 100), i)).Subscribe(ctxT(t, 2*time.Second), func(context.Context, *client.Message) {}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Directory(ctxT(t, 2*time.Second)); !errors.Is(err, client.ErrRejected) || !strings.Contains(err.Error(), "over the 2048 bytes an answer of the broker may have") {
		t.Fatalf("a directory over the answer limit: %v", err)
	}
}
