package client_test

// The request path (requestpath.go): the goroutine hand-offs a round trip
// costs, and what a reply read from the connection's buffer keeps.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestRequestRoundTripHandOffs pins the goroutine hand-offs a request
// round trip costs the two clients, one requester at a time and sixteen
// at once on one connection: the responder's reader hands the request to
// an executor worker and the requester's reader hands the reply to the
// caller; neither writer goroutine is woken, because the callers and the
// handlers' workers write themselves. A change that adds a hand-off (a
// write through the writer goroutine, a second executor hop) fails it.
func TestRequestRoundTripHandOffs(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		srv, cl := echoPair(t, e)
		ch := cl.Scope("s").Channel("echo")
		if _, err := ch.Request(ctxT(t, 5*time.Second), "server", nil); err != nil { // warm: the handler is known to the broker
			t.Fatal(err)
		}
		for _, callers := range []int{1, 16} {
			const perCaller = 200
			n := int64(callers * perCaller)
			st0, sa0, sw0 := client.HandOffs(srv)
			ct0, ca0, cw0 := client.HandOffs(cl)
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					payload := make([]byte, 128)
					for range perCaller {
						if _, err := ch.Request(ctxT(t, 5*time.Second), "server", payload); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			st, sa, sw := client.HandOffs(srv)
			ct, ca, cw := client.HandOffs(cl)
			// The bounds tell one hand-off per request from two, and none
			// from one per request, with room for what a loaded machine
			// adds (a worker preempted while it holds the write lock, a
			// heartbeat, a broker event that also runs on the executor).
			slack := n / 4
			check := func(who, what string, got, want int64) {
				t.Helper()
				if got < want || got > want+slack {
					t.Errorf("%d callers: %s: %d %s for %d round trips, want %d (up to %d more)", callers, who, got, what, n, want, slack)
				}
			}
			check("responder", "requests handed to the executor", st-st0, n)
			check("requester", "replies handed to the waiting caller", ca-ca0, n)
			check("responder", "answers handed to a caller", sa-sa0, 0)
			check("requester", "tasks handed to the executor", ct-ct0, 0)
			check("responder", "wake-ups of its writer goroutine (the workers write the replies)", sw-sw0, 0)
			check("requester", "wake-ups of its writer goroutine (the callers write the requests)", cw-cw0, 0)
			t.Logf("%d callers, per round trip: responder %.3f executor, %.3f writer; requester %.3f answer, %.3f writer",
				callers, float64(st-st0)/float64(n), float64(sw-sw0)/float64(n), float64(ca-ca0)/float64(n), float64(cw-cw0)/float64(n))
		}
	})
}

// TestRequestErrorOutlivesTheReadBuffer: a failed request's error is read
// from the reply in the connection's read buffer; it must keep its own
// copies, unchanged by the frames read after it.
func TestRequestErrorOutlivesTheReadBuffer(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		srv, cl := echoPair(t, e)
		if _, err := srv.Scope("s").Channel("fail").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
			return nil, &client.HandlerError{RC: 42, Text: "no such order"}
		}); err != nil {
			t.Fatal(err)
		}
		_, err := cl.Scope("s").Channel("fail").Request(ctxT(t, 5*time.Second), "server", nil)
		var re *client.RequestError
		if !errors.As(err, &re) {
			t.Fatalf("%v", err)
		}
		want := *re
		filler := make([]byte, 512)
		for i := range filler {
			filler[i] = 'x'
		}
		for range 50 { // overwrite the read buffer many times
			if _, err := cl.Scope("s").Channel("echo").Request(ctxT(t, 5*time.Second), "server", filler); err != nil {
				t.Fatal(err)
			}
		}
		if *re != want || re.Kind != wire.ResultHandler || re.RC != 42 || re.Text != "no such order" || re.From != "server.bus" {
			t.Fatalf("the error changed or is wrong: %+v (was %+v)", *re, want)
		}
	})
}
