package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/wire"
)

// TestBusEdgePushReachesOnlyItsProtocolsInboxes: the home of an inbox
// takes a forwarded edge push or receive (package trueseal's, through
// another broker) only for a device id of the protocol it names, so no
// edge push lands in a busbar inbox, and no busbar push (its sealed header
// checked) in an edge one. Commands sent on the bus by a NATS client in
// b1's name.
func TestBusEdgePushReachesOnlyItsProtocolsInboxes(t *testing.T) {
	u := startRelayBus(t, "b2")
	home := u.brokers[1]
	nc, err := nats.Connect(u.nats.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	answers := make(chan *nats.Msg, 8)
	if _, err := nc.ChanSubscribe("busbar.relayed.b1.b2", answers); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	busbarDev := identity(t).Public().ID().String()
	n := 0
	ask := func(op, proto, device string) *nats.Msg {
		t.Helper()
		n++
		id := fmt.Sprint(n)
		msg := &nats.Msg{Subject: "busbar.relay.b2.b1", Data: []byte("opaque"), Header: nats.Header{}}
		for k, v := range map[string]string{"op": op, "id": id, "proto": proto, "device": device, "conn": "c1", "n": "1", "pipe": wire.PipelineFirst, "sid": "s" + id} {
			msg.Header.Set(k, v)
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-answers:
			if a.Header.Get("id") != id {
				t.Fatalf("%s %s %q: answered %v", op, proto, device, a.Header)
			}
			return a
		case <-time.After(busSettle):
			t.Fatalf("%s %s %q not answered", op, proto, device)
			return nil
		}
	}
	for _, c := range []struct{ op, proto, device string }{
		{"edgepush", "trueseal", busbarDev},      // a busbar inbox
		{"edgepush", "trueseal", "trueseal."},    // no device after the label
		{"edgepush", "trueseal", "other.abc"},    // another protocol's
		{"edgepush", "", "abc"},                  // no protocol
		{"edgepush", "Trueseal", "Trueseal.abc"}, // not a protocol's name
		{"edgereceive", "trueseal", busbarDev},   // a busbar device's session
		{"push", "trueseal", "trueseal.abc"},     // busbar's push: the blob is not sealed
	} {
		if a := ask(c.op, c.proto, c.device); a.Header.Get("rc") != string(wire.ResultMalformed) {
			t.Fatalf("%s %s %q answered %q, want MALFORMED", c.op, c.proto, c.device, a.Header.Get("rc"))
		}
	}
	if st, _ := home.Broker.RelayStats(); st.Blobs != 0 {
		t.Fatalf("the home stored %d blobs", st.Blobs)
	}
	if a := ask("edgepush", "trueseal", "trueseal.abc"); a.Header.Get("rc") != "" || string(a.Data) != "1" {
		t.Fatalf("a trueseal push answered %v %q, want its sequence", a.Header, a.Data)
	}
	if in := home.Broker.RelayStore().Inbox("trueseal.abc"); in.Blobs != 1 {
		t.Fatalf("the trueseal inbox holds %d blobs, want 1", in.Blobs)
	}
}
