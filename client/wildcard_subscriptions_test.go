package client_test

// Wildcard subscriptions through a real broker: what each pattern
// receives from every kind of message, once per subscription, and only
// what the principal may receive.

import (
	"errors"
	"slices"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func channelsOf(in *inbox) []string {
	var out []string
	for i := range in.Len() {
		out = append(out, in.Get(i).Channel()+"="+string(in.Get(i).Payload()))
	}
	slices.Sort(out)
	return out
}

func accepted(res client.PublishResult) int {
	n := 0
	for _, r := range res.Results {
		if r.Result == wire.Accepted {
			n++
		}
	}
	return n
}

func TestWildcardSubscriptionsReceiveWhatMatches(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	ctx := ctxT(t, 10*time.Second)
	var star, rest, exact, ns, all inbox
	for name, in := range map[string]*inbox{"orders.*": &star, "orders.>": &rest, "orders.new": &exact, "shop:*": &ns, ">": &all} {
		if _, err := a.Scope("p").Channel(name).Subscribe(ctx, in.Handler); err != nil {
			t.Fatalf("subscribe %s: %v", name, err)
		}
	}
	pub := b.Scope("q")
	// A stream, a publication and a send, each on a channel some pattern
	// matches.
	if err := pub.Channel("orders.new").Emit(ctx, []byte("1")); err != nil {
		t.Fatal(err)
	}
	res, err := pub.Channel("orders.new.eu").Publish(ctx, []byte("2"))
	if err != nil || accepted(res) != 1 {
		t.Fatalf("publish orders.new.eu: %+v %v", res, err)
	}
	if r, err := pub.Channel("shop:cart").Send(ctx, "alpha", []byte("3")); err != nil || r.Result != wire.Accepted {
		t.Fatalf("send shop:cart: %+v %v", r, err)
	}
	if err := pub.Channel("misc").Emit(ctx, []byte("4")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "every delivery", func() bool { return all.Len() == 4 })
	for _, c := range []struct {
		in   *inbox
		want []string
	}{
		{&star, []string{"orders.new=1"}},
		{&rest, []string{"orders.new.eu=2", "orders.new=1"}},
		{&exact, []string{"orders.new=1"}},
		{&ns, []string{"shop:cart=3"}},
		{&all, []string{"misc=4", "orders.new.eu=2", "orders.new=1", "shop:cart=3"}},
	} {
		testbroker.Eventually(t, 5*time.Second, "deliveries", func() bool { return c.in.Len() == len(c.want) })
		if got := channelsOf(c.in); !slices.Equal(got, c.want) {
			t.Errorf("received %v, want %v", got, c.want)
		}
	}

	// A pattern is for subscriptions only, and a malformed one is refused
	// before anything is sent.
	if _, err := pub.Channel("orders.*").Publish(ctx, nil); !errors.Is(err, auth.ErrBadChannel) {
		t.Errorf("publish on a pattern: %v, want ErrBadChannel", err)
	}
	for _, name := range []string{"orders.>.x", "bus.>", "orders.**", "a:*:b"} {
		if _, err := a.Scope("p").Channel(name).Subscribe(ctx, star.Handler); !errors.Is(err, auth.ErrBadChannel) {
			t.Errorf("subscribe %q: %v, want ErrBadChannel", name, err)
		}
	}
}

func TestWildcardSubscriptionReceivesOnlyWhatThePrincipalMay(t *testing.T) {
	narrow := auth.Principal{Name: "narrow", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
		Subscribe: []auth.Pattern{"orders.public.*"},
	}}
	e := testbroker.Start(t, "unix", testOpts(), narrow)
	a := connect(t, e, "alpha", func(o *client.Options) { o.Credential.Principal = "narrow" })
	b := connect(t, e, "beta")
	ctx := ctxT(t, 10*time.Second)
	var in inbox
	if _, err := a.Scope("p").Channel("orders.>").Subscribe(ctx, in.Handler); err != nil {
		t.Fatalf("orders.> overlaps orders.public.*: %v", err)
	}
	if _, err := a.Scope("p").Channel("billing.*").Subscribe(ctx, in.Handler); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("billing.* overlaps nothing granted: %v, want REJECTED", err)
	}
	pub := b.Scope("q")
	for _, ch := range []string{"orders.secret", "orders.public.eu"} {
		res, err := pub.Channel(ch).Publish(ctx, []byte(ch))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"orders.secret": 0, "orders.public.eu": 1}[ch]; accepted(res) != want {
			t.Fatalf("publish %s: %v, want %d accepted", ch, res.Results, want)
		}
		if err := pub.Channel(ch).Emit(ctx, []byte(ch)); err != nil {
			t.Fatal(err)
		}
	}
	testbroker.Eventually(t, 5*time.Second, "two deliveries", func() bool { return in.Len() == 2 })
	// The marker: a later stream the subscriber may receive arrives after
	// anything the broker might have let through before it.
	if err := pub.Channel("orders.public.end").Emit(ctx, []byte("end")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "the marker", func() bool { return in.Len() == 3 })
	if got, want := channelsOf(&in), []string{"orders.public.end=end", "orders.public.eu=orders.public.eu", "orders.public.eu=orders.public.eu"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
}
