package broker

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"busbar/auth"
	"busbar/wire"
)

// The index must find exactly what matching every subscription one by one
// (auth.Pattern.Match) finds, each subscriber once, as subscriptions come
// and go.
func TestSubscriptionIndexAgreesWithPatternMatch(t *testing.T) {
	names := []string{
		"orders", "orders.new", "orders.*", "orders.>", "*.new", "*", ">", "*.*", "orders.*.eu",
		"orders.new.eu", "a.>", "*.>", "ns:x", "ns:*", "ns:>", "*:x", "*:*", "other:*", "ns:a.b",
	}
	channels := []string{
		"orders", "orders.new", "orders.old", "orders.new.eu", "orders.new.us", "a", "a.b", "a.b.c",
		"ns:x", "ns:y", "other:x", "ns:a.b", "bus.hello", "x.new",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	x := newSubIndex[int]()
	held := map[[2]int]bool{} // (subscriber, name index)
	for step := range 3000 {
		who, ni := rng.IntN(4), rng.IntN(len(names))
		k := [2]int{who, ni}
		if held[k] {
			x.remove(names[ni], who)
			delete(held, k)
		} else {
			x.add(names[ni], who)
			held[k] = true
		}
		for _, ch := range channels {
			var want []int
			for k := range held {
				n := names[k[1]]
				hit := n == ch
				if auth.IsPattern(n) {
					hit = auth.Pattern(n).Match(ch)
				}
				if hit && !slices.Contains(want, k[0]) {
					want = append(want, k[0])
				}
			}
			got := slices.Clone(x.match(ch))
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: %q matched %v, want %v (held %v)", step, ch, got, want, held)
			}
		}
	}
	for k := range held {
		x.remove(names[k[1]], k[0])
	}
	if x.wild != 0 || len(x.exact) != 0 || len(x.ns) != 0 || len(x.tree.next) != 0 || len(x.all) != 0 {
		t.Fatalf("empty index keeps entries: wild %d exact %v ns %v tree %v", x.wild, x.exact, x.ns, x.tree.next)
	}
}

// benchRouteAmong measures routing one stream message on orders.created,
// which one connection's "orders.*" receives, while n other subscriptions
// (exact channels, dotted and namespaced patterns) that do not match it
// are held: the cost must stay flat as n grows.
func benchRouteAmong(b *testing.B, n int) {
	br, secret := newTestBroker(b, Options{MaxRegistrations: n + 1})
	b.Cleanup(func() { _ = br.Shutdown(b.Context()) })
	pub := join(b, br, secret, "pub")
	go func() { _, _ = io.Copy(io.Discard, pub.nc) }()
	sub := join(b, br, secret, "sub")
	go func() { _, _ = io.Copy(io.Discard, sub.nc) }()
	crowd := join(b, br, secret, "crowd")
	go func() { _, _ = io.Copy(io.Discard, crowd.nc) }()
	if r := br.register(br.dir.lookup("sub"), wire.CmdSubscribe, "orders.*", ""); r != nil {
		b.Fatal(r.text)
	}
	cc := br.dir.lookup("crowd")
	for i := range n {
		var name string
		switch i % 5 {
		case 0:
			name = "chan" + strconv.Itoa(i)
		case 1:
			name = "orders" + strconv.Itoa(i) + ".*"
		case 2:
			name = fmt.Sprintf("region%d.>", i)
		case 3:
			name = fmt.Sprintf("*.created.t%d", i)
		default:
			name = fmt.Sprintf("ns%d:*", i)
		}
		if r := br.register(cc, wire.CmdSubscribe, name, ""); r != nil {
			b.Fatalf("%s: %s", name, r.text)
		}
	}
	if got := br.dir.subscribers("orders.created"); len(got) != 1 || got[0].node != "sub" {
		b.Fatalf("orders.created reaches %d connections, want sub alone", len(got))
	}
	loopStream(b, br, "pub", false)
}

func BenchmarkRouteWildcardAmong(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run("subs="+strconv.Itoa(n), func(b *testing.B) { benchRouteAmong(b, n) })
	}
}
