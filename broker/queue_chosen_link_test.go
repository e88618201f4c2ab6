package broker

import (
	"testing"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// TestStreamFromALinkForAQueueMemberThatLeft: another broker chose a
// queue's member here that has left since (it had not heard yet). Every
// plain subscriber still gets the message, never with the brokers'
// queue-chosen header, the queue's remaining member is not given it (the
// choice holds), and the message lost for the member that left is
// counted, queue_member_gone. The same when no member of any queue is
// left here.
func TestStreamFromALinkForAQueueMemberThatLeft(t *testing.T) {
	for _, stay := range []bool{true, false} {
		br, secret := newTestBroker(t, Options{})
		t.Cleanup(func() { _ = br.Shutdown(t.Context()) })
		plain := join(t, br, secret, "plain")
		if r := br.register(br.dir.lookup("plain"), wire.CmdSubscribe, "news", ""); r != nil {
			t.Fatal(r.text)
		}
		var member *rawNode
		if stay {
			member = join(t, br, secret, "member")
			if r := br.register(br.dir.lookup("member"), wire.CmdSubscribe, "news", "workers"); r != nil {
				t.Fatal(r.text)
			}
		}
		frame := func(id string) []byte {
			return wire.New(wire.TypeStream, "news").WithHeader(wire.HeaderID, id).WithHeader(wire.HeaderFrom, "far.bus").
				WithHeader(wire.HeaderTTL, "30000").WithHeader(wire.HeaderQueueChosen, "gone").WithBody([]byte(id)).ToBytes()
		}
		l := &link{endpoint: endpoint{b: br, node: "b2", addr: "b2.bus"}}
		var v hotpath.View
		for _, id := range []string{"m1", "m2"} {
			if err := hotpath.ParseView(frame(id), &v); err != nil {
				t.Fatal(err)
			}
			br.dispatchLink(l, &v, nil)
		}
		for _, id := range []string{"m1", "m2"} {
			m := plain.next(t, "a stream message", streamOf)
			if string(m.Body()) != id || m.Value(wire.HeaderFrom) != "far.bus" {
				t.Fatalf("member stays %v: the plain subscriber got %q", stay, m)
			}
			if _, ok := m.Get(wire.HeaderQueueChosen); ok {
				t.Fatalf("member stays %v: the plain subscriber saw the brokers' header: %q", stay, m)
			}
		}
		if got := br.Stats().Drops[DropQueueMemberGone]; got != 2 {
			t.Fatalf("member stays %v: queue_member_gone %d, want 2", stay, got)
		}
		if member != nil { // given nothing: a marker sent now is the first it reads
			if r := br.register(br.dir.lookup("member"), wire.CmdSubscribe, "marker", ""); r != nil {
				t.Fatal(r.text)
			}
			br.dispatchLink(l, viewOf(t, wire.New(wire.TypeStream, "marker").WithHeader(wire.HeaderID, "k").
				WithHeader(wire.HeaderFrom, "far.bus").WithHeader(wire.HeaderTTL, "30000").ToBytes()), nil)
			if m := member.next(t, "the marker", streamOf); m.Value(wire.HeaderCommand) != "marker" {
				t.Fatalf("the member not chosen got %q", m)
			}
		}
	}
}

func streamOf(m *wire.Message) bool { return m.Value(wire.HeaderType) == wire.TypeStream }

func viewOf(t *testing.T, frame []byte) *hotpath.View {
	t.Helper()
	v := new(hotpath.View)
	if err := hotpath.ParseView(frame, v); err != nil {
		t.Fatal(err)
	}
	return v
}
