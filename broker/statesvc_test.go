package broker

// The broker's state service as nodes on pipes drive it: who may move a
// namespace's clock.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"busbar/state"
	"busbar/wire"
)

// TestOpenKeyWriterCannotExhaustOwnersClock: any writer of an open key may
// pick the highest version (state.MaxVersion); the owner must still open
// other keys of its namespace afterwards. One broker: the namespace's
// clock is decided by the broker the write is made on.
// (Such a write used to take the namespace clock to MaxVersion, and the
// owner's Open, which writes at Clock()+1, was refused for every key.)
func TestOpenKeyWriterCannotExhaustOwnersClock(t *testing.T) {
	b, secret := newTestBroker(t, Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	owner := join(t, b, secret, "owner")
	foe := join(t, b, secret, "foe")
	t.Cleanup(func() { owner.nc.Close(); foe.nc.Close() })

	if m := owner.ask(t, wire.CmdStateOpen, "1", state.Query{NS: "ns", Key: "shared"}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("owner open: %q", m)
	}
	m := foe.ask(t, wire.CmdStateSet, "2", state.Delta{NS: "ns", Key: "shared", Value: json.RawMessage(`2`), Version: state.MaxVersion})
	if m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("write to an open key: %q", m)
	}
	if m := owner.ask(t, wire.CmdStateOpen, "3", state.Query{NS: "ns", Key: "other"}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("after another node wrote an open key at MaxVersion, the owner can no longer open any key: %q", m)
	}
}
