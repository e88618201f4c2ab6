package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestRequestErrorOutlivesTheReadBuffer: a failed request's error is read
// from the reply in the connection's read buffer; it must keep its own
// copies, unchanged by the frames read after it.
func TestRequestErrorOutlivesTheReadBuffer(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		srv := connect(t, e, "server")
		cl := connect(t, e, "client")
		s := srv.Scope("s")
		if _, err := s.Channel("fail").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
			return nil, &client.HandlerError{RC: 42, Text: "no such order"}
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
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
