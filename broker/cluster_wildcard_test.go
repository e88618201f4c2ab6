package broker_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestBusWildcardSubscribersOnOtherBrokersReceive: a stream and a
// publication reach the wildcard subscribers of every broker, each once,
// and a publication counts them among its candidates.
func TestBusWildcardSubscribersOnOtherBrokersReceive(t *testing.T) {
	u := startBus(t)
	alpha, beta, gamma := u.three(t)
	ctx, cancel := context.WithTimeout(context.Background(), busSettle)
	defer cancel()
	var mu sync.Mutex
	got := map[string][]string{}
	on := func(node string) client.EventHandler {
		return func(_ context.Context, m *client.Message) {
			mu.Lock()
			defer mu.Unlock()
			got[node] = append(got[node], m.Channel()+"="+string(m.Payload()))
		}
	}
	if _, err := beta.Scope("s").Channel("orders.*").Subscribe(ctx, on("beta")); err != nil {
		t.Fatal(err)
	}
	if _, err := gamma.Scope("s").Channel("shop:>").Subscribe(ctx, on("gamma")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, busSettle, "b1 to know both subscriptions", func() bool {
		subs := map[string][]string{}
		for _, n := range u.brokers[0].Broker.Directory() {
			subs[n.Node] = n.Subscriptions
		}
		return slices.Equal(subs["beta"], []string{"orders.*"}) && slices.Equal(subs["gamma"], []string{"shop:>"})
	})
	pub := alpha.Scope("p")
	if err := pub.Channel("orders.new").Emit(ctx, []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := pub.Channel("shop:cart").Emit(ctx, []byte("2")); err != nil {
		t.Fatal(err)
	}
	res, err := pub.Channel("orders.old").Publish(ctx, []byte("3"))
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]wire.Result{}
	for _, r := range res.Results {
		results[r.Node] = r.Result
	}
	if results["beta"] != wire.Accepted || results["gamma"] != wire.NoSubscriber {
		t.Fatalf("publish orders.old: %v, want beta ACCEPTED, gamma NO_SUBSCRIBER", res.Results)
	}
	want := map[string][]string{"beta": {"orders.new=1", "orders.old=3"}, "gamma": {"shop:cart=2"}}
	testbroker.Eventually(t, busSettle, "every delivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["beta"]) == 2 && len(got["gamma"]) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	for node, w := range want {
		slices.Sort(got[node])
		if !slices.Equal(got[node], w) {
			t.Errorf("%s received %v, want %v", node, got[node], w)
		}
	}
}
