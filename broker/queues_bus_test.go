package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbus"
	"busbar/wire"
)

// TestNodeMayNotSendTheBrokersQueueHeader: on a bus, a node's publication
// or stream message that carries the header by which brokers pass on
// their choice of queue members is refused (REJECTED), so a node cannot
// pick a queue's member on another broker; the member gets nothing.
func TestNodeMayNotSendTheBrokersQueueHeader(t *testing.T) {
	u := startBus(t)
	ctx := ctxT(t, busSettle)
	member := connect(t, u.brokers[1], "member")
	got := make(chan string, 4)
	if _, err := member.Scope("s").Channel("news").QueueSubscribe(ctx, "q", func(_ context.Context, m *client.Message) { got <- string(m.Payload()) }); err != nil {
		t.Fatal(err)
	}
	testbus.AwaitKnown(t, u.brokers[:1], "member:news")
	r := u.brokers[0].DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "forger", "local", u.brokers[0].Secrets["local"])
	// The stream message first: it has no answer, and the publication's
	// answer comes after it is dealt with (one reader, in order).
	refused := u.brokers[0].Broker.Stats().Drops[broker.DropStreamRefused]
	for _, typ := range []string{wire.TypeStream, wire.TypeEvent} {
		r.Send(t, wire.New(typ, "news").WithHeader(wire.HeaderID, "p-"+typ).WithHeader(wire.HeaderQueueChosen, "member").WithBody([]byte("forged")))
	}
	if a := r.Read(t); a.Value(wire.HeaderResult) != string(wire.ResultRejected) || !strings.Contains(a.Value(wire.HeaderError), wire.HeaderQueueChosen) {
		t.Fatalf("a publication with %s: %q", wire.HeaderQueueChosen, a)
	}
	if n := u.brokers[0].Broker.Stats().Drops[broker.DropStreamRefused]; n != refused+1 {
		t.Fatalf("stream messages refused: %d, want %d", n, refused+1)
	}
	// Without the header the member gets it: nothing forged came first.
	pub := connect(t, u.brokers[0], "pub")
	if err := pub.Scope("s").Channel("news").Emit(ctx, []byte("plain")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "plain" {
			t.Fatalf("the member got %q", p)
		}
	case <-time.After(busSettle):
		t.Fatal("the member got nothing")
	}
}
