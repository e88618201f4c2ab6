package broker_test

import (
	"context"
	"testing"
	"time"
)

// TestBusDeadlinesCountFromEachMessagesArrival: a request to a node on
// another broker with a ttl shorter than the link's age is answered: the
// receiving broker counts a ttl from when the message arrived, not from
// the link's first message. Counted from the link's first message, every
// request once the link is older than the ttl would fail at once; a
// request that fails only after most of its ttl is a slow machine's, not
// that, and is tried again.
func TestBusDeadlinesCountFromEachMessagesArrival(t *testing.T) {
	u := startBus(t)
	alpha, beta, _ := u.three(t)
	ctx := ctxT(t, busSettle)
	if _, err := beta.Scope("s").Channel("echo").Handle(ctx, echo); err != nil {
		t.Fatal(err)
	}
	awaitKnown(t, u.brokers[:1], "beta")
	const ttl = 300 * time.Millisecond
	ch := alpha.Scope("s").Channel("echo")
	var first time.Time
	answeredOld := 0 // answers once the link was older than the ttl
	for n := 0; first.IsZero() || time.Since(first) < 4*ttl || answeredOld < 3; n++ {
		if ctx.Err() != nil {
			t.Fatalf("%d requests answered once the link was older than the ttl, want 3", answeredOld)
		}
		rctx, cancel := context.WithTimeout(ctx, ttl)
		start := time.Now()
		_, err := ch.Request(rctx, "beta", []byte("hi"))
		cancel()
		if err != nil {
			if took := time.Since(start); took < ttl/2 {
				t.Fatalf("request %d, %v into the link's life, failed after %v of its %v: %v", n, time.Since(first), took, ttl, err)
			}
			continue // the machine was slower than the ttl
		}
		if first.IsZero() {
			first = time.Now()
		} else if time.Since(first) > ttl {
			answeredOld++
		}
	}
}
