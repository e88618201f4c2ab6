package broker_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
)

// TestBusTrafficCountsWhatLinksBring: a stream from a node on b1 to a
// subscriber on b2 is counted in and out on both brokers: b2 counts what
// the link from b1 brought and queued for its subscriber.
func TestBusTrafficCountsWhatLinksBring(t *testing.T) {
	u := startBus(t)
	alpha, beta, _ := u.three(t)
	ctx, cancel := context.WithTimeout(context.Background(), busSettle)
	defer cancel()
	var got atomic.Int64
	if _, err := beta.Scope("s").Channel("orders").Subscribe(ctx, func(context.Context, *client.Message) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, busSettle, "b1 to know beta's subscription", func() bool {
		for _, n := range u.brokers[0].Broker.Directory() {
			if n.Node == "beta" && slices.Contains(n.Subscriptions, "orders") {
				return true
			}
		}
		return false
	})
	const n = 3
	for range n {
		if err := alpha.Scope("p").Channel("orders").Emit(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	testbroker.Eventually(t, busSettle, "the streams delivered", func() bool { return got.Load() == n })
	for _, e := range u.brokers[:2] {
		testbroker.Await(t, busSettle, e.Broker.Name()+"'s counts", func() error {
			tr := e.Broker.Traffic()
			if in, out := tr.In[broker.MsgStream].Msgs, tr.Out[broker.MsgStream].Msgs; in != n || out != n {
				return fmt.Errorf("%s: %d streams in, %d out, want %d", e.Broker.Name(), in, out, n)
			}
			return nil
		})
	}
}
