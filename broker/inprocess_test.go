package broker_test

// The broker's own endpoint: code embedded in the broker, connected in
// process under the broker's name, is a node like any other.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestBrokerAsEndpoint: code embedded in the broker connects under the
// broker's own name and serves requests, events and publications like any
// node (docs/messaging.md#the-model); nodes reach it over real sockets.
func TestBrokerAsEndpoint(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	self := connect(t, e, e.Broker.Name(), func(o *client.Options) {
		o.Dial = func(context.Context) (net.Conn, error) { return e.Broker.DialInProcess() }
	})
	if _, err := self.Scope("core").Channel("time.now").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		return []byte("noon"), nil
	}); err != nil {
		t.Fatal(err)
	}
	var in inbox
	if _, err := self.Scope("core").Channel("audit").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	a := connect(t, e, "alpha")
	r, err := a.Scope("s").Channel("time.now").Request(ctxT(t, 5*time.Second), e.Broker.Name(), nil)
	if err != nil || string(r.Payload()) != "noon" || r.From() != e.Broker.Name()+".bus" {
		t.Fatalf("request to the broker: %v %+v", err, r)
	}
	if rc, _ := a.Scope("s").Channel("audit").Send(ctxT(t, 5*time.Second), e.Broker.Name()+".bus", []byte("x")); rc.Result != wire.Accepted {
		t.Fatalf("send to the broker: %+v", rc)
	}
	res, err := a.Scope("s").Channel("audit").Publish(ctxT(t, 5*time.Second), []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.NodeResult{{Node: "alpha", Result: wire.NoSubscriber}, {Node: e.Broker.Name(), Result: wire.Accepted}}
	if len(res.Results) != 2 || res.Results[0] != want[0] || res.Results[1] != want[1] {
		t.Fatalf("publish: %v", res.Results)
	}
	testbroker.Eventually(t, 5*time.Second, "broker's subscriber", func() bool { return in.Len() == 2 })
	// The broker's endpoint can call nodes too.
	if _, err := a.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	if r, err := self.Scope("core").Channel("echo").Request(ctxT(t, 5*time.Second), "alpha", []byte("hi")); err != nil || string(r.Payload()) != "hi" {
		t.Fatalf("broker to node: %v", err)
	}
}

// TestDialInProcessAs: an in-process connection authenticated at the edge
// may claim only the nodes its principal may, never the broker's name,
// and its principal's permissions apply to what it sends and receives.
func TestDialInProcessAs(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	p := &auth.Principal{Name: "isl", Nodes: []auth.Pattern{"island-*"}, Permissions: auth.Permissions{
		Send: []auth.Pattern{"mb:ok"}, Subscribe: []auth.Pattern{"mb:in"}}}
	as := func(o *client.Options) {
		o.MaxReconnects = client.NoReconnect
		o.Dial = func(context.Context) (net.Conn, error) { return e.Broker.DialInProcessAs(p) }
	}
	for _, node := range []string{"other", e.Broker.Name()} {
		o := client.Options{Node: node}
		as(&o)
		if c, err := client.Connect(ctxT(t, 5*time.Second), o); !errors.Is(err, client.ErrAuth) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("claiming %q: %v, want ErrAuth", node, err)
		}
	}
	isl := connect(t, e, "island-a", as)
	a := connect(t, e, "alpha")
	var in inbox
	if _, err := a.Scope("s").Channel("mb:ok").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	if rc, _ := isl.Scope("s").Channel("mb:ok").Send(ctxT(t, 5*time.Second), "alpha", nil); rc.Result != wire.Accepted {
		t.Fatalf("a permitted send: %+v", rc)
	}
	if rc, _ := isl.Scope("s").Channel("mb:no").Send(ctxT(t, 5*time.Second), "alpha", nil); rc.Result != wire.Rejected {
		t.Fatalf("a send the principal may not make: %+v", rc)
	}
	if rc, _ := a.Scope("s").Channel("mb:ok").Send(ctxT(t, 5*time.Second), "island-a", nil); rc.Result != wire.Rejected {
		t.Fatalf("a send the principal may not receive: %+v", rc)
	}
}

// TestHelloAdvertise: a node's advertised address (a MoonBridge backend's
// game address) is in its directory entry; one past wire.MaxAdvertiseLen,
// or with a byte that is not printable ASCII, is refused at the hello.
func TestHelloAdvertise(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	hello := func(node, adv string) *wire.Message {
		r := e.DialRaw(t)
		body, _ := json.Marshal(wire.Hello{Node: node, Principal: "local", Secret: e.Secrets["local"], Advertise: adv})
		r.Send(t, wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body))
		return r.Read(t)
	}
	edge := "tcp://" + strings.Repeat("h", wire.MaxAdvertiseLen-len("tcp://"))
	if m := hello("adv", edge); wire.ResponseRC(m).IsError() {
		t.Fatalf("%d bytes: %s", len(edge), m.Value(wire.HeaderError))
	}
	a := connect(t, e, "alpha")
	nodes, err := a.Directory(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes {
		found = found || n.Node == "adv" && n.Advertised == edge
	}
	if !found {
		t.Fatalf("directory: %+v", nodes)
	}
	for _, bad := range []string{edge + "x", "tcp://h:1 x", "tcp://h\x00"} {
		if m := hello("bad", bad); m.Value(wire.HeaderResult) != string(wire.ResultMalformed) {
			t.Errorf("advertise %q: %s", bad, m)
		}
	}
}
