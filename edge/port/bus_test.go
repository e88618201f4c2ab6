package port

// A port answering on the bus through a real broker: by node and by the
// service it announces, with its errors as typed request errors.

import (
	"errors"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
)

func TestServeBus(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{})
	_, s := serve(t, notes())
	node := testclient.Connect(t, e, "desk")
	ctx := ctxT(t, 10*time.Second)
	if err := s.ServeBus(ctx, node, "notes"); err != nil {
		t.Fatal(err)
	}
	caller := testclient.Connect(t, e, "script")
	ch := caller.Scope("s").Channel(BusChannel("notes"))
	for _, target := range []string{"desk", "notes"} { // the node, then the service
		reply, err := ch.Request(ctx, target, []byte(`{"command":"greet","args":{"name":"ann"}}`))
		if err != nil || string(reply.Payload()) != `{"greeting":"hello ann"}` {
			t.Fatalf("greet via %s: %v %v", target, reply, err)
		}
	}
	if reply, err := ch.Request(ctx, "notes", []byte(`{"command":"info"}`)); err != nil || string(reply.Payload()) == "" {
		t.Fatalf("info: %v", err)
	}
	for _, c := range []struct {
		payload string
		rc      int
		text    string
	}{
		{`{"command":"fail"}`, 10, "boom"},
		{`{"command":"nope"}`, 10, "Unknown command 'nope'. Available: careful, fail, greet, help, info"},
		{`not json`, 20, `want a JSON payload {"command": NAME, "args": ARGS}`},
		{`{"args":1}`, 20, `want a JSON payload {"command": NAME, "args": ARGS}`},
	} {
		_, err := ch.Request(ctx, "notes", []byte(c.payload))
		var re *client.RequestError
		if !errors.Is(err, client.ErrHandlerFailed) || !errors.As(err, &re) || int(re.RC) != c.rc || re.Text != c.text {
			t.Errorf("%s: %v, want HANDLER_FAILED rc %d %q", c.payload, err, c.rc, c.text)
		}
	}
}
