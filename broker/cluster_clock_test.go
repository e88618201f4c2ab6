package broker_test

import (
	"context"
	"testing"
	"time"
)

// TestBusDeadlinesCountFromEachMessagesArrival: a request to a node on
// another broker with a ttl shorter than the link's age is answered: the
// receiving broker counts a ttl from when the message arrived, not from
// the link's first message.
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
	for n := 0; first.IsZero() || time.Since(first) < 4*ttl; n++ {
		rctx, cancel := context.WithTimeout(ctx, ttl)
		_, err := ch.Request(rctx, "beta", []byte("hi"))
		cancel()
		if err != nil {
			t.Fatalf("request %d, %v into the link's life: %v", n, time.Since(first), err)
		}
		if first.IsZero() {
			first = time.Now()
		}
	}
}
