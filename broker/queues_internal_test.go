package broker

import (
	"testing"

	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// forwarded is m as a broker forwards it: from stamped, a ttl slot.
func forwarded(t *testing.T, m *wire.Message) *sendq.Frame {
	t.Helper()
	var v hotpath.View
	if err := hotpath.ParseView(m.ToBytes(), &v); err != nil {
		t.Fatal(err)
	}
	f := sendq.NewFrame()
	f.B, f.TTLOff = hotpath.AppendForward(f.B, &v, "pub.bus", true)
	return f
}

// TestQueueChosenHeaderGoesInAndComesOutWholly: the header is inserted in
// key order into a forwarded frame, which still parses, keeps its ttl
// slot where the writer stamps it, and is the same frame again once the
// header is cut; an empty choice and a frame without one work too.
func TestQueueChosenHeaderGoesInAndComesOutWholly(t *testing.T) {
	for _, chosen := range []string{"m1,m3", ""} {
		f := forwarded(t, wire.New(wire.TypeEvent, "news").WithHeader(wire.HeaderID, "e1").WithBody([]byte("payload")))
		orig := string(f.B)
		at, _, found := headerLine(f.B, wire.HeaderQueueChosen)
		if found {
			t.Fatal("found a header that is not there")
		}
		if _, _, found := headerLine(f.B, wire.HeaderID); !found {
			t.Fatal("the id header not found")
		}
		g := withHeader(f, at, wire.HeaderQueueChosen, chosen)
		hotpath.PatchTTL(g.B[g.TTLOff:], 1234)
		var v hotpath.View
		if err := hotpath.ParseView(g.B[hotpath.PrefixLen:], &v); err != nil || hotpath.FrameLen(g.B) != len(g.B)-hotpath.PrefixLen {
			t.Fatalf("%q: %v", g.B, err)
		}
		if v.Value(wire.HeaderTTL) != "0000001234" || v.Value(wire.HeaderID) != "e1" || string(v.Body()) != "payload" {
			t.Fatalf("%q", g.B)
		}
		m, err := v.Message()
		if err != nil || m.Value(wire.HeaderQueueChosen) != chosen {
			t.Fatalf("%v %q", err, g.B)
		}
		if got, found := takeChosen(g); got != chosen || !found {
			t.Fatalf("took %q, want %q", got, chosen)
		}
		hotpath.PatchTTL(g.B[g.TTLOff:], 0)
		if string(g.B) != orig {
			t.Fatalf("cut: %q, want %q", g.B, orig)
		}
		if got, found := takeChosen(g); got != "" || found || string(g.B) != orig {
			t.Fatal("a frame without the header changed")
		}
		g.Release()
		f.Release()
	}
}

// TestQueueChosenListsNodes: a node is listed only by its whole name.
func TestQueueChosenListsNodes(t *testing.T) {
	for _, c := range []struct {
		list, node string
		want       bool
	}{{"a,b", "a", true}, {"a,b", "b", true}, {"ab,b", "a", false}, {"", "a", false}, {"a", "a", true}, {"aa", "a", false}} {
		if listed(c.list, c.node) != c.want {
			t.Errorf("listed(%q, %q) = %v", c.list, c.node, !c.want)
		}
	}
}

// TestQueueChoiceAllocatesNothingWithoutMembers: with no queue member on
// this broker nor in a bus's directory, the choice returns the
// subscribers as they are, allocating nothing, as on a lone broker.
func TestQueueChoiceAllocatesNothingWithoutMembers(t *testing.T) {
	b := &Broker{}
	b.cl = &cluster{b: b}
	b.bus = b.cl
	ds := []*conn{{}, {}, {}}
	if n := testing.AllocsPerRun(100, func() {
		if got, choice := b.shareQueues("news", ds, true); len(got) != 3 || choice != nil {
			t.Fatal(got, choice)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per choice", n)
	}
}
