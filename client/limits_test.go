package client_test

// Limits the client applies itself, before anything reaches the broker.
// The broker's own limits are checked in package broker.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestMaxPayloadEdge: the client refuses, before sending it, a payload
// over the broker's MaxPayload (from its welcome), naming the limit; one at
// the limit is delivered. (broker's TestMaxPayloadEdge checks the broker's
// own refusal of what a client sends anyway.)
func TestMaxPayloadEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 1024})
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	ch := b.Scope("s").Channel("x")
	if r, _ := ch.Send(ctxT(t, 5*time.Second), "alpha", make([]byte, 1024)); r.Result != wire.Accepted {
		t.Fatalf("at the limit: %+v", r)
	}
	if _, err := ch.Send(ctxT(t, 5*time.Second), "alpha", make([]byte, 1025)); !errors.Is(err, client.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("past the limit: %v", err)
	}
}

// TestReplyOverMaxPayloadRefused: a reply over MaxPayload is refused (by
// the handler's client and by the broker), not delivered.
// (An oversize reply used to be delivered.)
func TestReplyOverMaxPayloadRefused(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 1024})
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("big").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		return make([]byte, 64<<10), nil
	}); err != nil {
		t.Fatal(err)
	}
	reply, err := b.Scope("s").Channel("big").Request(ctxT(t, 5*time.Second), "alpha", nil)
	if err == nil {
		t.Fatalf("reply of %d bytes delivered past MaxPayload=1024", len(reply.Payload()))
	}
}
