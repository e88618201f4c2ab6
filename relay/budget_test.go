package relay

// The two budgets (budget.go, docs/relay-store.md#limits): busbar's own
// inboxes and the edge protocols' are bounded apart, each limit at and
// past its edge, and no amount of edge pushes refuses a push to one of
// busbar's own inboxes.

import (
	"fmt"
	"testing"
)

func TestEdgeDeviceIsTheIDWithADot(t *testing.T) {
	for d, edge := range map[string]bool{
		"trueseal.AAAA": true, "x.e": true, "Dev_1.phone-2": true,
		"ab3xk7q2": false, "busbar-device": false, "d": false,
	} {
		if EdgeDevice(d) != edge || (classOf(d) == classEdge) != edge {
			t.Fatalf("EdgeDevice(%q) = %v, want %v", d, EdgeDevice(d), edge)
		}
	}
}

// Each edge limit at its edge and one past it; busbar's own limits,
// set lower, bind busbar's inboxes only.
func TestEdgeBudgetAtAndPastEachEdge(t *testing.T) {
	s := open(t, "", Options{MaxStoreBytes: 10, MaxInboxes: 1, MaxInboxBlobs: 1, MaxInboxBytes: 10,
		Edge: Budget{MaxStoreBytes: 1000, MaxInboxes: 3, MaxInboxBlobs: 3, MaxInboxBytes: 600}})

	// One inbox's blobs: 3 taken, the 4th refused.
	for range 3 {
		push(t, s, "e.blobs", []byte("x"))
	}
	refused(t, s, "e.blobs", []byte("x"), ErrInboxFull)
	// One inbox's bytes: 600 taken (at the edge), one more refused.
	push(t, s, "e.bytes", make([]byte, 600))
	refused(t, s, "e.bytes", []byte("x"), ErrInboxFull)
	// The class's bytes: 3 + 600 + 397 = 1000 taken, one more refused.
	push(t, s, "e.third", make([]byte, 397))
	refused(t, s, "e.blobs", []byte("x"), ErrInboxFull)
	if st := s.Stats(); st.Edge.Bytes != 1000 || st.Edge.Inboxes != 3 || st.Own != (ClassStats{}) {
		t.Fatalf("stats %+v / %+v", st.Edge, st.Own)
	}
	checkCounts(t, s)

	// busbar's own budget is untouched by the edge's, and binds at its own
	// edge: 10 bytes in 1 inbox of 1 blob.
	own := push(t, s, "own", make([]byte, 10))
	refused(t, s, "own", []byte("x"), ErrInboxFull)
	refused(t, s, "own2", []byte("x"), ErrInboxFull)
	if st := s.Stats(); st.Own.Bytes != 10 || st.Own.Inboxes != 1 {
		t.Fatalf("own %+v", st.Own)
	}
	// An ack on busbar's side makes room on busbar's side only.
	if err := s.Ack("own", own); err != nil {
		t.Fatal(err)
	}
	refused(t, s, "e.fourth", []byte("x"), ErrInboxFull)
	push(t, s, "own2", []byte("x"))
	checkCounts(t, s)
}

// The edge's inboxes: 3 taken, a 4th new one refused, one that holds a
// blob not refused for it; an inbox emptied makes room.
func TestEdgeMaxInboxes(t *testing.T) {
	s := open(t, "", Options{Edge: Budget{MaxInboxes: 3}})
	var first Seq
	for i := range 3 {
		seq := push(t, s, fmt.Sprint("e.", i), []byte("x"))
		if i == 0 {
			first = seq
		}
	}
	refused(t, s, "e.3", []byte("x"), ErrInboxFull)
	push(t, s, "e.0", []byte("x"))
	push(t, s, "own", []byte("x")) // busbar's inboxes are not the edge's
	if err := s.Ack("e.0", first); err != nil {
		t.Fatal(err)
	}
	refused(t, s, "e.3", []byte("x"), ErrInboxFull) // e.0 holds its second blob still
	if _, err := s.AckRange("e.0", 1, first+100); err != nil {
		t.Fatal(err)
	}
	push(t, s, "e.3", []byte("x"))
	checkCounts(t, s)
}

// The flood the edge budget is for: anonymous pushes to made-up edge
// inboxes until every new one is refused, and busbar's own devices still
// get every push their own budget allows; after a restart too, the class
// of each inbox coming from its id.
func TestEdgeFloodNeverRefusesBusbarsOwnPushes(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxPushRate: -1, MaxStoreBytes: 8 << 10, MaxInboxes: 8,
		Edge: Budget{MaxStoreBytes: 64 << 10, MaxInboxes: 16}}
	s := open(t, dir, opts)
	blob := make([]byte, 1<<10)
	taken, full := 0, 0
	for i := 0; full < 100; i++ { // until 100 new edge inboxes in a row are refused
		if _, err := s.Push(ctx(t), fmt.Sprintf("trueseal.%d", i), blob); err == nil {
			taken++
			full = 0
		} else {
			refused(t, s, fmt.Sprintf("trueseal.%d", i), blob, ErrInboxFull)
			full++
		}
	}
	if st := s.Stats(); taken != 16 || st.Edge.Inboxes != 16 || st.Edge.Bytes != 16<<10 {
		t.Fatalf("the edge took %d pushes; %+v", taken, st.Edge)
	}
	own := func(s *Store) {
		t.Helper()
		for i := range 8 { // busbar's own budget, whole: 8 inboxes of 1 KiB
			push(t, s, fmt.Sprint("own", i), blob)
		}
		refused(t, s, "own-past", []byte("x"), ErrInboxFull)
		checkCounts(t, s)
	}
	own(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, opts)
	if st := s.Stats(); st.Edge.Inboxes != 16 || st.Own.Inboxes != 8 || st.Own.Bytes != 8<<10 {
		t.Fatalf("after a restart: edge %+v, own %+v", st.Edge, st.Own)
	}
	checkCounts(t, s)
	refused(t, s, "trueseal.new", blob, ErrInboxFull)
	refused(t, s, "own-new", blob, ErrInboxFull)
}

func TestEdgeBudgetDefaultsAndNegatives(t *testing.T) {
	s := open(t, "", Options{})
	if got, want := s.opts.Edge, (Budget{MaxStoreBytes: DefaultEdgeMaxStoreBytes, MaxInboxes: DefaultEdgeMaxInboxes,
		MaxInboxBlobs: DefaultEdgeMaxInboxBlobs, MaxInboxBytes: DefaultEdgeMaxInboxBytes}); got != want {
		t.Fatalf("edge budget %+v, want %+v", got, want)
	}
	for _, b := range []Budget{{MaxStoreBytes: -1}, {MaxInboxes: -1}, {MaxInboxBlobs: -1}, {MaxInboxBytes: -1}} {
		if st, err := Open(t.TempDir(), Options{Edge: b, Logger: quiet}); err == nil {
			st.Close()
			t.Fatalf("opened with edge budget %+v", b)
		}
	}
}
