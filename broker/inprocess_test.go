package broker_test

// The broker's own endpoint: code embedded in the broker, connected in
// process under the broker's name, is a node like any other.

import (
	"context"
	"net"
	"testing"
	"time"

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
