package broker_test

// Permissions, checked by the broker on both sides: what a node may send,
// request, publish, and what it may subscribe to, handle and receive.

import (
	"errors"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestPermissions: each action is allowed only on the channels its
// principal's patterns grant, on the sending and the receiving side;
// publication candidates are the nodes that may receive; refusals count.
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
		if _, err := full.Scope("s").Channel(ch).Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := full.Scope("s").Channel("rpc.x").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Scope("s").Channel("orders.created").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
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
	if _, err := d.Scope("s").Channel("orders.other").Subscribe(ctxT(t, 5*time.Second), in.Handler); !errors.Is(err, client.ErrRejected) {
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
