package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// What the broker lets an edge adapter's node do (a handler on a
// pattern, the kinds its peer's protocol has; edge/moonbridge tests it
// through one) stays closed to a node that logs in over the network: its
// pattern handler is refused, and its TIMEOUT, REJECTED, NOT_CONNECTED
// or PROTOCOL_ERROR becomes HANDLER_FAILED.
func TestOnlyAnEdgeNodeClaimsMore(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	b := connect(t, e, "beta")
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "forger", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdHandle).WithHeader(wire.HeaderID, "p").WithBody([]byte("rpc.*")))
	if m := readReply(t, r, "p"); !wire.ResponseRC(m).IsError() {
		t.Fatalf("a network node registered a handler on a pattern: %v", m)
	}
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdHandle).WithHeader(wire.HeaderID, "h").WithBody([]byte("rpc")))
	readReply(t, r, "h")
	for i, kind := range []wire.Result{wire.ResultTimeout, wire.ResultRejected, wire.ResultNotConnected, wire.ResultProtocol} {
		res := make(chan error, 1)
		go func() {
			_, err := b.Scope("s").Channel("rpc").Request(ctxT(t, 5*time.Second), "forger", nil)
			res <- err
		}()
		req := r.Read(t)
		r.Send(t, wire.New(wire.TypeResponse, "rpc").WithHeader(wire.HeaderID, fmt.Sprint("r", i)).
			WithHeader(wire.HeaderReplyTo, req.Value(wire.HeaderID)).WithHeader(wire.HeaderRC, "20").
			WithHeader(wire.HeaderResult, string(kind)))
		var re *client.RequestError
		if err := <-res; !errors.As(err, &re) || re.Kind != wire.ResultHandler {
			t.Errorf("a network node's %s reached the caller as %v", kind, err)
		}
	}
}
