package broker_test

// busbar tap at the broker: what a tapper is shown, what it is not
// (permissions, filters), its limits, and its end with its connection.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nextTap returns the next tap event, failing after 5 s.
func nextTap(t *testing.T, tp *client.Tap) wire.TapEvent {
	t.Helper()
	ev, err := tp.Next(ctx5(t))
	if err != nil {
		t.Fatalf("tap: %v", err)
	}
	return ev
}

func TestTapShowsEveryKindOfMessageWithItsHeadersAndPreview(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	ctx := ctx5(t)
	watcher := connect(t, e, "watcher")
	tp, err := watcher.Tap(ctx, wire.TapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	alpha, beta := connect(t, e, "alpha"), connect(t, e, "beta")
	if _, err := beta.Scope("p").Channel("orders.new").Subscribe(ctx, func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := beta.Scope("p").Channel("math.upper").Handle(ctx, echo); err != nil {
		t.Fatal(err)
	}
	ch := alpha.Scope("p").Channel("orders.new")
	if _, err := ch.Send(ctx, "beta", []byte("one")); err != nil {
		t.Fatal(err)
	}
	ev := nextTap(t, tp)
	if ev.Kind != "send" || ev.From != "alpha.bus" || ev.To != "beta" || ev.Channel != "orders.new" || ev.Size != 3 ||
		string(ev.Preview) != "one" || ev.Truncated || ev.ID == "" || ev.Headers["ttl"] == "" {
		t.Fatalf("send: %+v", ev)
	}
	if _, err := ch.Publish(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if ev := nextTap(t, tp); ev.Kind != "publish" || ev.To != "" || string(ev.Preview) != "two" {
		t.Fatalf("publish: %+v", ev)
	}
	if err := ch.Emit(ctx, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if ev := nextTap(t, tp); ev.Kind != "stream" || string(ev.Preview) != "three" {
		t.Fatalf("stream: %+v", ev)
	}
	if _, err := alpha.Scope("p").Channel("math.upper").Request(ctx, "beta", []byte("four")); err != nil {
		t.Fatal(err)
	}
	if ev := nextTap(t, tp); ev.Kind != "request" || ev.From != "alpha.bus" || ev.To != "beta" || ev.Channel != "math.upper" {
		t.Fatalf("request: %+v", ev)
	}
	if ev := nextTap(t, tp); ev.Kind != "response" || ev.From != "beta.bus" || string(ev.Preview) != "four" || ev.Headers["reply-to"] == "" {
		t.Fatalf("response: %+v", ev)
	}

	// The preview at its edge and past it.
	for _, n := range []int{wire.TapPreviewBytes, wire.TapPreviewBytes + 1} {
		if err := ch.Emit(ctx, []byte(strings.Repeat("x", n))); err != nil {
			t.Fatal(err)
		}
		ev := nextTap(t, tp)
		if ev.Size != n || len(ev.Preview) != wire.TapPreviewBytes || ev.Truncated != (n > wire.TapPreviewBytes) {
			t.Fatalf("a body of %d bytes: size %d, preview %d, truncated %v", n, ev.Size, len(ev.Preview), ev.Truncated)
		}
	}
}

func TestTapShowsOnlyWhatThePrincipalMayTapAndReceive(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts(),
		auth.Principal{Name: "nosy", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			Subscribe: []auth.Pattern{">"}}},
		auth.Principal{Name: "ops", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			Tap: []auth.Pattern{">"}, Subscribe: []auth.Pattern{"public.>"}, Handle: []auth.Pattern{"rpc.open"}}},
		auth.Principal{Name: "narrow", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			Tap: []auth.Pattern{"public.b"}, Subscribe: []auth.Pattern{">"}}},
	)
	ctx := ctx5(t)
	as := func(p string) func(*client.Options) { return func(o *client.Options) { o.Credential.Principal = p } }

	nosy := connect(t, e, "nosy", as("nosy"))
	var re *client.RequestError
	if _, err := nosy.Tap(ctx, wire.TapRequest{}); !errors.As(err, &re) || re.Kind != wire.Rejected || !strings.Contains(re.Text, "tap permission") {
		t.Fatalf("a tap without the permission: %v", err)
	}
	if e.Broker.Tappers() != 0 {
		t.Fatalf("a refused tap is installed")
	}

	opsTap, err := connect(t, e, "ops", as("ops")).Tap(ctx, wire.TapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	narrowTap, err := connect(t, e, "narrow", as("narrow")).Tap(ctx, wire.TapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	src := connect(t, e, "src")
	sub := connect(t, e, "sub")
	for _, c := range []string{"secret.a", "public.a", "public.b"} {
		if _, err := sub.Scope("p").Channel(c).Subscribe(ctx, func(context.Context, *client.Message) {}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"rpc.open", "rpc.closed"} {
		if _, err := sub.Scope("p").Channel(c).Handle(ctx, echo); err != nil {
			t.Fatal(err)
		}
	}
	send := func(channel string) {
		if _, err := src.Scope("p").Channel(channel).Send(ctx, "sub", []byte(channel)); err != nil {
			t.Fatal(err)
		}
	}
	send("secret.a")
	send("public.a")
	if _, err := src.Scope("p").Channel("rpc.closed").Request(ctx, "sub", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Scope("p").Channel("rpc.open").Request(ctx, "sub", nil); err != nil {
		t.Fatal(err)
	}
	send("public.b")
	// ops could receive public.a (subscribe) and the request on rpc.open
	// (handle), not secret.a, not rpc.closed, and no response: it may not
	// request. Events arrive in order, so public.b ends the list.
	var seen []string
	for {
		ev := nextTap(t, opsTap)
		seen = append(seen, ev.Kind+" "+ev.Channel)
		if ev.Channel == "public.b" {
			break
		}
	}
	if strings.Join(seen, ", ") != "send public.a, request rpc.open, send public.b" {
		t.Fatalf("ops saw %q", seen)
	}
	// narrow may tap public.b only.
	if ev := nextTap(t, narrowTap); ev.Channel != "public.b" {
		t.Fatalf("narrow saw %+v first", ev)
	}
}

func TestTapFiltersByChannelAndNode(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	ctx := ctx5(t)
	watcher := connect(t, e, "watcher")
	a, b, c := connect(t, e, "a"), connect(t, e, "b"), connect(t, e, "c")
	for _, n := range []*client.Client{a, b, c} {
		for _, ch := range []string{"x.one", "y.one"} {
			if _, err := n.Scope("p").Channel(ch).Subscribe(ctx, func(context.Context, *client.Message) {}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tp, err := watcher.Tap(ctx, wire.TapRequest{Channels: []string{"x.>"}, Nodes: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from *client.Client, ch, to string) {
		if _, err := from.Scope("p").Channel(ch).Send(ctx, to, []byte(ch+" to "+to)); err != nil {
			t.Fatal(err)
		}
	}
	send(a, "y.one", "b") // other channel
	send(a, "x.one", "c") // other nodes
	send(a, "x.one", "b") // to b
	send(b, "x.one", "c") // from b
	for _, want := range []string{"x.one to b", "x.one to c"} {
		if ev := nextTap(t, tp); string(ev.Preview) != want {
			t.Fatalf("saw %q, want %q", ev.Preview, want)
		}
	}
	// A filter at its limits.
	many := make([]string, wire.MaxTapPatterns+1)
	for i := range many {
		many[i] = "x.>"
	}
	if _, err := watcher.Tap(ctx, wire.TapRequest{Channels: many[:wire.MaxTapPatterns]}); err != nil {
		t.Fatalf("%d patterns: %v", wire.MaxTapPatterns, err)
	}
	var re *client.RequestError
	if _, err := watcher.Tap(ctx, wire.TapRequest{Nodes: many}); !errors.As(err, &re) || re.Kind != wire.Rejected {
		t.Fatalf("%d nodes: %v", len(many), err)
	}
	if _, err := watcher.Tap(ctx, wire.TapRequest{Channels: []string{"bad..pattern"}}); !errors.As(err, &re) || re.Kind != wire.Rejected {
		t.Fatalf("a bad pattern: %v", err)
	}
}

func TestTapEndsWithItsConnection(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	ctx := ctx5(t)
	watcher, err := dialClient(e, "watcher")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := watcher.Tap(ctx, wire.TapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Broker.Tappers() != 1 {
		t.Fatalf("tappers %d", e.Broker.Tappers())
	}
	watcher.Close()
	if _, err := tp.Next(ctx); !errors.Is(err, client.ErrTapEnded) {
		t.Fatalf("Next after Close: %v", err)
	}
	testbroker.Eventually(t, 5*time.Second, "the tap removed", func() bool { return e.Broker.Tappers() == 0 })

	// Close ends a tap on a live client, at the broker too.
	other := connect(t, e, "other")
	tp2, err := other.Tap(ctx, wire.TapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp2.Close(ctx); err != nil || e.Broker.Tappers() != 0 {
		t.Fatalf("Close: %v, tappers %d", err, e.Broker.Tappers())
	}
	if _, err := tp2.Next(ctx); !errors.Is(err, client.ErrTapEnded) {
		t.Fatalf("Next after Close: %v", err)
	}
}
