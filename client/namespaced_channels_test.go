package client_test

// Namespaced (MoonBridge "namespace:path") channels through a real broker:
// every kind of message, and permissions granted by namespaced patterns.

import (
	"context"
	"errors"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func TestNamespacedChannelsEndToEnd(t *testing.T) {
	mod := auth.Principal{Name: "mod", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
		Send: []auth.Pattern{"myplugin:*"}, Request: []auth.Pattern{"myplugin:>"}, Publish: []auth.Pattern{"myplugin:*"},
		Subscribe: []auth.Pattern{"*:events"}, Handle: []auth.Pattern{"myplugin:rpc"},
	}}
	e := testbroker.Start(t, "unix", testOpts(), mod)
	asMod := func(o *client.Options) { o.Credential.Principal = "mod" }
	a := connect(t, e, "alpha", asMod)
	b := connect(t, e, "beta", asMod)
	ctx := ctxT(t, 10*time.Second)

	var in inbox
	if _, err := a.Scope("p").Channel("myplugin:events").Subscribe(ctx, in.Handler); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Scope("p").Channel("myplugin:rpc").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return append([]byte("got "), m.Payload()...), nil
	}); err != nil {
		t.Fatal(err)
	}

	ch := b.Scope("q").Channel("myplugin:events")
	r, err := ch.Send(ctx, "alpha", []byte("one"))
	if err != nil || r.Result != wire.Accepted {
		t.Fatalf("send: %+v %v", r, err)
	}
	res, err := ch.Publish(ctx, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, nr := range res.Results {
		if nr.Result == wire.Accepted {
			accepted++
		}
	}
	if accepted != 1 {
		t.Fatalf("publish results %v, want one ACCEPTED (alpha)", res.Results)
	}
	testbroker.Eventually(t, 5*time.Second, "both events", func() bool { return in.Len() == 2 })
	// The default executor runs callbacks concurrently: either may come first.
	got := map[string]bool{}
	for i := range 2 {
		m := in.Get(i)
		if m.Channel() != "myplugin:events" {
			t.Fatalf("delivered %q on %q", m.Payload(), m.Channel())
		}
		got[string(m.Payload())] = true
	}
	if !got["one"] || !got["two"] {
		t.Fatalf("delivered %v, want one and two", got)
	}
	reply, err := b.Scope("q").Channel("myplugin:rpc").Request(ctx, "alpha", []byte("x"))
	if err != nil || string(reply.Payload()) != "got x" {
		t.Fatalf("request: %v %v", reply, err)
	}

	// What the patterns do not grant, the broker refuses.
	if _, err := b.Scope("q").Channel("other:events").Publish(ctx, nil); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("publish other:events: %v, want REJECTED", err)
	}
	if _, err := b.Scope("q").Channel("myplugin.events").Publish(ctx, nil); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("publish myplugin.events (dotted): %v, want REJECTED", err)
	}
	if _, err := a.Scope("p").Channel("myplugin:chat").Subscribe(ctx, in.Handler); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("subscribe myplugin:chat: %v, want REJECTED", err)
	}
	// A malformed name is refused by the client before anything is sent.
	for _, name := range []string{"MyPlugin:events", "a:b:c", ":events", "myplugin:"} {
		if _, err := b.Scope("q").Channel(name).Publish(ctx, nil); !errors.Is(err, auth.ErrBadChannel) {
			t.Errorf("publish %q: %v, want ErrBadChannel", name, err)
		}
	}
}
