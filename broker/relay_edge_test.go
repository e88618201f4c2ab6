package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
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
	nc, answers := asB1(t, u, 8)
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

// TestBusEdgeSessionEndsOnADeliveryLostBetweenBrokers: the home numbers
// the blobs it sends a forwarded edge session; one that does not follow
// the last (a NATS message lost on the way) ends the session instead of
// overtaking the lost blob, so the device, reconnecting, gets both in
// order. The home is a NATS client speaking as broker bx.
func TestBusEdgeSessionEndsOnADeliveryLostBetweenBrokers(t *testing.T) {
	nc := testnats.Start(t, 1)
	opts := testOpts()
	opts.Name = "b1"
	opts.Cluster = broker.ClusterOptions{URLs: nc.URLs(), Heartbeat: busHeartbeat, Lease: busLease, Relays: []string{"bx"}}
	e := testbroker.Start(t, "tcp", opts)
	home := startFakeHome(t, nc.URL(0))
	testbroker.Eventually(t, busSettle, "the fake home on the bus", func() bool { return where(e)["fakenode"] == "bx" })
	x, err := e.Broker.EdgeInboxes("trueseal")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	type opened struct {
		s   *broker.EdgeSession
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := x.Receive(ctx, "trueseal.abc")
		ch <- opened{s, err}
	}()
	m := home.next(t)
	if m.Header.Get("op") != "edgereceive" || m.Header.Get("proto") != "trueseal" || m.Header.Get("device") != "trueseal.abc" {
		t.Fatalf("forwarded: %v", m.Header)
	}
	send := func(kv ...string) {
		t.Helper()
		msg := nats.NewMsg("busbar.relayed.b1.bx")
		for i := 0; i+1 < len(kv); i += 2 {
			msg.Header.Set(kv[i], kv[i+1])
		}
		if kv[1] == "deliver" {
			msg.Data = []byte("blob " + kv[len(kv)-1])
		}
		if err := home.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	send("op", "answer", "id", m.Header.Get("id"))
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.s.Close()
	sid := m.Header.Get("sid")
	send("op", "deliver", "sid", sid, "seq", "10", "n", "1")
	if b, err := o.s.Next(ctx); err != nil || b.Seq != 10 || string(b.Data) != "blob 1" {
		t.Fatalf("the first blob: %v %q %v", b.Seq, b.Data, err)
	}
	send("op", "deliver", "sid", sid, "seq", "12", "n", "3") // number 2 lost
	if b, err := o.s.Next(ctx); err == nil {
		t.Fatalf("got blob %d %q past a lost one, want the session ended", b.Seq, b.Data)
	}
	o.s.Close()
	if m := home.next(t); m.Header.Get("op") != "end" || m.Header.Get("sid") != sid {
		t.Fatalf("after the session: %v", m.Header)
	}
}
