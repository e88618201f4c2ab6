package broker

// What a bus keeps of a namespace besides its entries (state_meta.go):
// its record and its tombstones, how they merge, how long a tombstone
// lives, and that both survive a restart.

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"busbar/state"
	"busbar/wire"
)

// quietBroker is what the state service's merge needs of a broker: a log.
func quietBroker() *Broker { return &Broker{log: slog.New(slog.DiscardHandler), bus: alone{}} }

func openState(t *testing.T, path string) *stateService {
	t.Helper()
	s := &stateService{}
	if err := s.open(path, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.close() })
	return s
}

// TestStateTombstoneKeptForItsRetention: a tombstone is stored, kept
// until TombstoneRetention has passed since the drop (its floor is the
// drop's time), and forgotten, on disk too, at that moment.
func TestStateTombstoneKeptForItsRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	dropped := time.Now()
	floor := uint64(dropped.UnixNano())
	s := openState(t, path)
	s.mu.Lock()
	s.buryLocked("gone", floor, quietBroker())
	s.mu.Unlock()
	if err := s.close(); err != nil {
		t.Fatal(err)
	}

	s = openState(t, path)
	if got := s.dropped["gone"]; got != floor {
		t.Fatalf("after a restart the tombstone's floor is %d, want %d", got, floor)
	}
	const retention = time.Hour
	if n, err := s.forgetTombstones(dropped.Add(retention-time.Nanosecond), retention); n != 0 || err != nil {
		t.Fatalf("just inside the retention: forgot %d (%v)", n, err)
	}
	if n, err := s.forgetTombstones(dropped.Add(retention), retention); n != 1 || err != nil {
		t.Fatalf("at the retention: forgot %d (%v)", n, err)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if s = openState(t, path); len(s.dropped) != 0 {
		t.Fatalf("a forgotten tombstone is back after a restart: %v", s.dropped)
	}
}

// TestStateTombstonePastItsRetentionIsNotLearnt: on a bus, a broker does
// not take from another a tombstone older than the retention (it would
// forget it at once), so brokers that forgot a tombstone are not taught it
// again by one that learnt it later; one just inside the retention is
// taken, and drops what it covers.
func TestStateTombstonePastItsRetentionIsNotLearnt(t *testing.T) {
	const retention = time.Hour
	b := quietBroker()
	b.cl = &cluster{opts: ClusterOptions{TombstoneRetention: retention}}
	b.bus = b.cl
	s := openState(t, filepath.Join(t.TempDir(), "state.db"))
	s.mergeRemote(stateMsg{Broker: "b9", NS: "ns", Owner: "a", Epoch: 1, OwnerAt: 1, Entries: []state.Entry{{Key: "k", Value: json.RawMessage(`1`), Version: 1, Source: "a"}}}, b)
	old := uint64(time.Now().Add(-retention).UnixNano())
	s.buryAll("b9", []nsTomb{{NS: "ns", Floor: old}}, b)
	if _, ok := s.dropped["ns"]; ok || s.spaces["ns"] == nil {
		t.Fatalf("a tombstone past the retention was taken: %v, ns held: %v", s.dropped, s.spaces["ns"] != nil)
	}
	recent := uint64(time.Now().Add(-retention + time.Minute).UnixNano())
	s.buryAll("b9", []nsTomb{{NS: "ns", Floor: recent}}, b)
	if s.dropped["ns"] != recent || s.spaces["ns"] != nil {
		t.Fatalf("a tombstone inside the retention: %v, ns held: %v", s.dropped, s.spaces["ns"] != nil)
	}
}

// TestStateRecordsMergeToOneAnswer: another broker's record of a
// namespace merges by its rules, so every broker ends with the same one
// whatever order they come in: the later incarnation, the owner with the
// later stamp (ties to the greater name), and a tombstone that drops
// every incarnation under its floor and voids copies of them.
func TestStateRecordsMergeToOneAnswer(t *testing.T) {
	b := quietBroker()
	entry := func(key, src string, ver uint64) []state.Entry {
		return []state.Entry{{Key: key, Value: json.RawMessage(`1`), Version: ver, Source: src}}
	}
	for _, tc := range []struct {
		name      string
		msgs      []stateMsg
		owner     string
		epoch     uint64
		keys      int
		inherited bool
	}{
		{"created here first", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
		}, "a", 10, 1, false},
		{"created concurrently: entries of both, the later owner", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
			{NS: "ns", Owner: "b", Epoch: 20, OwnerAt: 20, Entries: entry("j", "b", 1)},
		}, "b", 20, 2, true},
		{"the same, the other order", []stateMsg{
			{NS: "ns", Owner: "b", Epoch: 20, OwnerAt: 20, Entries: entry("j", "b", 1)},
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
		}, "b", 20, 2, true},
		{"owners stamped alike: the greater name", []stateMsg{
			{NS: "ns", Owner: "b", Epoch: 10, OwnerAt: 10, Entries: entry("k", "b", 1)},
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10},
		}, "b", 10, 1, false},
		{"a new owner, then a stale copy", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
			{NS: "ns", Owner: "heir", Epoch: 10, OwnerAt: 30},
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
		}, "heir", 10, 1, true},
		{"a drop, then a copy of what it dropped", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
			{NS: "ns", Dropped: 15},
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 2)},
		}, "", 0, 0, false},
		{"a copy of a dropped incarnation, then the drop", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 10, OwnerAt: 10, Entries: entry("k", "a", 1)},
			{NS: "ns", Owner: "a", Epoch: 20, OwnerAt: 20, Dropped: 15, Entries: entry("j", "a", 1)},
		}, "a", 20, 1, false},
		{"a drop at the floor of the incarnation drops it", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 15, OwnerAt: 15, Entries: entry("k", "a", 1)},
			{NS: "ns", Dropped: 15},
		}, "", 0, 0, false},
		{"a drop under the incarnation leaves it", []stateMsg{
			{NS: "ns", Owner: "a", Epoch: 16, OwnerAt: 16, Entries: entry("k", "a", 1)},
			{NS: "ns", Dropped: 15},
		}, "a", 16, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s := openState(t, path)
			for _, m := range tc.msgs {
				m.Broker = "b9"
				s.mergeRemote(m, b)
			}
			n, meta := s.spaces["ns"], s.meta["ns"]
			switch {
			case tc.owner == "" && n != nil:
				t.Fatalf("ns is held, owned by %s", n.Owner())
			case tc.owner == "":
				return
			case n == nil:
				t.Fatal("ns is not held")
			case n.Owner() != tc.owner || meta.Epoch != tc.epoch || n.Len() != tc.keys || meta.Inherited != tc.inherited:
				t.Fatalf("ns owned by %s, epoch %d, %d keys, inherited %v; want %s, %d, %d, %v",
					n.Owner(), meta.Epoch, n.Len(), meta.Inherited, tc.owner, tc.epoch, tc.keys, tc.inherited)
			}
			if err := s.close(); err != nil { // and the store holds the same, and is trusted
				t.Fatal(err)
			}
			again := openState(t, path)
			if m := again.meta["ns"]; m != meta || again.spaces["ns"].Owner() != tc.owner {
				t.Fatalf("after a restart: %+v owned by %s, want %+v", m, again.spaces["ns"].Owner(), meta)
			}
		})
	}
}

// TestStateGivenToAnotherOwnerSurvivesARestart: a namespace given to a
// new owner keeps the former owner's entries, and its store is trusted at
// the next start (keys not open written by a node that no longer owns the
// namespace are the namespace's history, not damage).
func TestStateGivenToAnotherOwnerSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b, secret := newTestBroker(t, Options{StatePath: path})
	owner, admin := join(t, b, secret, "owner"), join(t, b, secret, "admin")
	if m := owner.ask(t, wire.CmdStateSet, "1", state.Delta{NS: "home", Key: "k", Value: json.RawMessage(`1`), Version: 1}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("write: %q", m)
	}
	if m := admin.ask(t, wire.CmdStateOwner, "2", state.Transfer{NS: "home", Owner: "heir"}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("owner: %q", m)
	}
	owner.nc.Close()
	admin.nc.Close()
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, _ = newTestBroker(t, Options{StatePath: path})
	t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
	reps, _ := b.state.replicas()
	if len(reps) != 1 || reps[0].snap.Owner != "heir" || len(reps[0].snap.Entries) != 1 || reps[0].snap.Entries[0].Source != "owner" {
		t.Fatalf("after a restart: %+v", reps)
	}
}
