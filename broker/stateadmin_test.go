package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"busbar/state"
	"busbar/wire"
)

// TestStateAdminTellsWatchersToResync: a namespace given to a new owner
// or dropped sends its watchers bus.state.reset, so a replica never keeps
// an owner or entries the broker no longer has; the new owner writes, the
// old one may not. One broker, on pipes, to read the broker's own
// messages; on a bus: TestBusStateDropReachesEveryBroker and
// TestBusStateNewOwnerReachesEveryBroker (state_bus_test.go).
func TestStateAdminTellsWatchersToResync(t *testing.T) {
	b, secret := newTestBroker(t, Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	owner := join(t, b, secret, "owner")
	watcher := join(t, b, secret, "watcher")
	admin := join(t, b, secret, "admin")
	t.Cleanup(func() { owner.nc.Close(); watcher.nc.Close(); admin.nc.Close() })
	ok := func(m *wire.Message, what string) {
		t.Helper()
		if m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("%s: %q", what, m)
		}
	}
	awaitReset := func() {
		t.Helper()
		_ = watcher.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			m, err := watcher.r.ReadMessage()
			if err != nil {
				t.Fatalf("no bus.state.reset: %v", err)
			}
			if m.Value(wire.HeaderCommand) == wire.CmdStateReset && strings.Contains(string(m.Body()), `"ns":"home"`) {
				return
			}
		}
	}
	ok(owner.ask(t, wire.CmdStateSet, "1", state.Delta{NS: "home", Key: "k", Value: json.RawMessage(`1`), Version: 1}), "write")
	ok(watcher.ask(t, wire.CmdStateWatch, "2", state.Query{NS: "home"}), "watch")

	m := admin.ask(t, wire.CmdStateOwner, "3", state.Transfer{NS: "home", Owner: "heir"})
	ok(m, "owner")
	var snap state.Snapshot
	if err := json.Unmarshal(m.Body(), &snap); err != nil || snap.Owner != "heir" || len(snap.Entries) != 1 {
		t.Fatalf("snapshot under the new owner: %s %v", m.Body(), err)
	}
	awaitReset()
	if m := owner.ask(t, wire.CmdStateSet, "4", state.Delta{NS: "home", Key: "k", Value: json.RawMessage(`2`), Version: 2}); m.Value(wire.HeaderRC) == "0" {
		t.Fatalf("the old owner still writes: %q", m)
	}
	heir := join(t, b, secret, "heir")
	t.Cleanup(func() { heir.nc.Close() })
	ok(heir.ask(t, wire.CmdStateSet, "5", state.Delta{NS: "home", Key: "k", Value: json.RawMessage(`3`), Version: 3}), "the new owner's write")

	ok(watcher.ask(t, wire.CmdStateWatch, "6", state.Query{NS: "home"}), "watch again")
	ok(admin.ask(t, wire.CmdStateDrop, "7", state.Query{NS: "home"}), "drop")
	awaitReset()
	m = watcher.ask(t, wire.CmdStateGet, "8", state.Query{NS: "home"})
	if err := json.Unmarshal(m.Body(), &snap); err != nil || snap.Owner != "" || len(snap.Entries) != 0 {
		t.Fatalf("a dropped namespace: %s %v", m.Body(), err)
	}
	if m := admin.ask(t, wire.CmdStateDrop, "9", state.Query{NS: "home"}); m.Value(wire.HeaderRC) == "0" || !strings.Contains(m.Value(wire.HeaderError), "no namespace") {
		t.Fatalf("dropping twice: %q", m)
	}
}
