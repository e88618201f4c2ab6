package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"busbar/wire"
)

// Every refusal is answered in the form its message calls for: a send gets
// a receipt, a request an error response (rc 20), a publication a
// bus.published (rc 10), a control command its response (rc 10), a frame
// that names nothing to answer a bus.error. Only refusals by permissions
// or limits count in Stats.Refused; outcomes such as NOT_CONNECTED do not.
func TestRefusalsAreAnsweredInTheFormTheirMessageCallsFor(t *testing.T) {
	b, secret := newTestBroker(t, Options{})
	n := join(t, b, secret, "n")
	t.Cleanup(func() {
		_ = n.nc.Close()
		_ = b.Shutdown(context.Background())
	})
	ev := func(id string) *wire.Message { return wire.New(wire.TypeEvent, "ch").WithHeader(wire.HeaderID, id) }
	req := func(id string) *wire.Message { return wire.New(wire.TypeRequest, "ch").WithHeader(wire.HeaderID, id) }
	for _, tc := range []struct {
		name             string
		send             *wire.Message
		command, replyTo string
		rc, result, from string
	}{
		{"send to a node not connected", ev("e1").WithHeader(wire.HeaderTo, "nobody"), wire.CmdReceipt, "e1", "", string(wire.NotConnected), "nobody"},
		{"send with a bad ttl", ev("e2").WithHeader(wire.HeaderTo, "nobody").WithHeader(wire.HeaderTTL, "x"), wire.CmdReceipt, "e2", "", string(wire.Rejected), "nobody"},
		{"send to a cross-mesh target", ev("e3").WithHeader(wire.HeaderTo, "a@b"), wire.CmdReceipt, "e3", "", string(wire.Rejected), "a@b"},
		{"request to a node not connected", req("r1").WithHeader(wire.HeaderTo, "nobody"), "ch", "r1", "20", string(wire.ResultNoHandler), "broker.bus"},
		{"request without a target", req("r2"), "ch", "r2", "20", string(wire.ResultRejected), "broker.bus"},
		{"publication with a bad ttl", ev("p1").WithHeader(wire.HeaderTTL, "x"), wire.CmdPublished, "p1", "10", string(wire.ResultRejected), ""},
		{"unknown control command", wire.New(wire.TypeRequest, "bus.nope").WithHeader(wire.HeaderID, "c1"), "bus.nope", "c1", "10", string(wire.ResultRejected), ""},
		{"event without an id", wire.New(wire.TypeEvent, "ch"), wire.CmdError, "", "20", string(wire.ResultMalformed), ""},
		{"unknown type", wire.New("bogus", "ch").WithHeader(wire.HeaderID, "x"), wire.CmdError, "", "20", string(wire.ResultMalformed), ""},
	} {
		n.send(t, tc.send)
		m, err := n.r.ReadMessage()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := [...]string{m.Value(wire.HeaderCommand), m.Value(wire.HeaderReplyTo), m.Value(wire.HeaderRC), m.Value(wire.HeaderResult), m.Value(wire.HeaderFrom)}
		want := [...]string{tc.command, tc.replyTo, tc.rc, tc.result, tc.from}
		if got != want {
			t.Errorf("%s: answered %q, want %q", tc.name, got, want)
		}
		if tc.command != wire.CmdReceipt && m.Value(wire.HeaderError) == "" {
			t.Errorf("%s: no error text", tc.name)
		}
	}
	if s := b.Stats(); s.Refused != 5 || s.Malformed != 2 {
		t.Errorf("Refused %d, Malformed %d; want 5 and 2", s.Refused, s.Malformed)
	}

	// A fatal refusal is answered, then the connection closes.
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(b.opts.MaxPayload+MaxFrameOverhead+1))
	if _, err := n.nc.Write(prefix[:]); err != nil {
		t.Fatal(err)
	}
	m, err := n.r.ReadMessage()
	if err != nil || m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) {
		t.Fatalf("oversize frame answered %v, %v", m, err)
	}
	if _, err := n.r.ReadMessage(); !errors.Is(err, io.EOF) {
		t.Fatalf("after a fatal refusal the connection gave %v, want EOF", err)
	}
}

// A refusal is an error whose text names its result.
func TestRefusalIsAnError(t *testing.T) {
	var err error = rejectf("not permitted to %s on %s", "send", "ch")
	if err.Error() != "REJECTED: not permitted to send on ch" {
		t.Fatalf("%q", err)
	}
	var r *refusal
	if !errors.As(err, &r) || r.result != wire.ResultRejected || r.fatal {
		t.Fatalf("%+v", r)
	}
	if !fatal(wire.ResultTooLarge, "x").fatal {
		t.Fatal("fatal is not fatal")
	}
}
