package broker

import (
	"strings"
	"testing"
	"time"

	"busbar/wire"
)

// TestReplyOverMaxPayloadIsRefusedByTheBroker: a reply whose payload is
// one byte over MaxPayload is not passed on, from a node or from a link
// (another broker's node), and the requester is told HANDLER_FAILED with
// the limit; a reply of exactly MaxPayload passes. (The client refuses to
// send one; a raw node or another broker is what the broker checks.)
func TestReplyOverMaxPayloadIsRefusedByTheBroker(t *testing.T) {
	const limit = 1024
	br, secret := newTestBroker(t, Options{MaxPayload: limit})
	t.Cleanup(func() { _ = br.Shutdown(t.Context()) })
	req := join(t, br, secret, "req")
	handler := join(t, br, secret, "handler")
	if r := br.register(br.dir.lookup("handler"), wire.CmdHandle, "big", ""); r != nil {
		t.Fatal(r.text)
	}
	l := &link{endpoint: endpoint{b: br, node: "b2", addr: "b2.bus"}}
	for _, size := range []int{limit, limit + 1} {
		for _, from := range []string{"a node", "a link"} {
			id := from[2:] + "-" + strings.Repeat("x", size-limit)
			reply := wire.New(wire.TypeResponse, "big").WithHeader(wire.HeaderReplyTo, id).WithHeader(wire.HeaderRC, "0").WithBody(make([]byte, size))
			if from == "a node" {
				req.send(t, wire.New(wire.TypeRequest, "big").WithHeader(wire.HeaderID, id).WithHeader(wire.HeaderTo, "handler"))
				handler.next(t, "the request", func(m *wire.Message) bool { return m.Value(wire.HeaderID) == id })
				handler.send(t, reply)
			} else { // as if the request had gone to another broker's node
				if !br.pend.add(l, id, &call{kind: callRequest, origin: br.dir.lookup("req"), deadline: time.Now().Add(time.Minute)}) {
					t.Fatal("the call was not opened")
				}
				br.dispatchLink(l, viewOf(t, reply.WithHeader(wire.HeaderFrom, "far.bus").ToBytes()), nil)
			}
			m := req.next(t, "the answer", replyTo(id))
			switch {
			case size == limit && (m.Value(wire.HeaderRC) != "0" || len(m.Body()) != limit):
				t.Fatalf("%d bytes from %s: %q", size, from, m.Value(wire.HeaderError))
			case size > limit && (m.Value(wire.HeaderResult) != string(wire.ResultHandler) || !strings.Contains(m.Value(wire.HeaderError), "over the limit of 1024")):
				t.Fatalf("%d bytes from %s passed: rc %s %q", size, from, m.Value(wire.HeaderRC), m.Value(wire.HeaderError))
			}
		}
	}
}
