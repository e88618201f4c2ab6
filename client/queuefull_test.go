package client_test

// A registration the client cannot queue, because its outbound queue is
// full, fails the way the broker's own refusal would: a *RequestError
// matching ErrOverload. The peer is a minimal broker that completes the
// handshake and then never reads, the one way to hold a client's queue
// full.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/wire"
)

// fakeBroker completes a handshake on srv and then never reads again, so
// the client's writer blocks and its outbound queue fills.
func fakeBroker(t *testing.T, srv net.Conn) {
	r, w := wire.NewReader(srv), wire.NewWriter(srv)
	info, _ := json.Marshal(wire.Info{Broker: "broker", Protocol: wire.ProtocolVersion, Nonce: make([]byte, 32)})
	_ = w.WriteMessage(wire.New(wire.TypeEvent, wire.CmdInfo).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithBody(info))
	_ = w.Flush()
	hello, err := r.ReadMessage()
	if err != nil {
		return
	}
	body, _ := json.Marshal(wire.Welcome{Node: "n", Broker: "broker", MaxPayload: 1 << 20, MaxInflight: 1024})
	_ = w.WriteMessage(wire.New(wire.TypeResponse, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).
		WithHeader(wire.HeaderReplyTo, hello.Value(wire.HeaderID)).WithHeader(wire.HeaderRC, "0").WithBody(body))
	_ = w.Flush()
}

// Subscribe and Handle when the client's own outbound queue is full. The
// Channel doc: "a *RequestError for Request, Publish, Subscribe and Handle
// ... including ... the client's own outbound queue full (BACKPRESSURED /
// OVERLOAD)". Subscribe and Handle used to return the unexported queue-full error
// itself; Publish already answered OVERLOAD.
func TestRegistrationWithAFullQueueIsOverload(t *testing.T) {
	cl, srv := net.Pipe()
	go fakeBroker(t, srv)
	c, err := client.Connect(context.Background(), client.Options{
		Node: "n", Credential: auth.Credential{Principal: "p", Secret: "s"}, MaxQueueMessages: 1,
		Dial: func(context.Context) (net.Conn, error) { return cl, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close(); _ = c.Close() }()
	s := c.Scope("x")
	h := func(context.Context, *client.Message) {}
	var last error
	for i := range 3 { // the writer takes one and blocks, the queue holds one, the third does not fit
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, last = s.Channel(fmt.Sprintf("c%d", i)).Subscribe(ctx, h)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, herr := s.Channel("h").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) { return nil, nil })
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, perr := s.Channel("p").Publish(ctx, nil)
	cancel()
	t.Logf("Subscribe: %T %v", last, last)
	t.Logf("Handle:    %T %v", herr, herr)
	t.Logf("Publish:   %T %v", perr, perr)
	for what, err := range map[string]error{"Subscribe": last, "Handle": herr} {
		var re *client.RequestError
		if !errors.As(err, &re) || !errors.Is(err, client.ErrOverload) {
			t.Errorf("%s with a full queue: %v (%T), not a *RequestError matching ErrOverload", what, err, err)
		}
	}
}
