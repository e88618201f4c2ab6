package broker_test

// The service registry on a bus: a node's services follow it to another
// broker (docs/cluster.md).

import (
	"fmt"
	"testing"
	"time"

	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestBusServiceMovesWithItsNode: a node that connects again through
// another broker replaces its old connection bus-wide; the old
// connection's services leave every broker's registry, and the new
// connection's announcement is the one record (its instance and epoch),
// with no collision between the two connections.
func TestBusServiceMovesWithItsNode(t *testing.T) {
	u := startBus(t)
	ctx := ctxT(t, 30*time.Second)
	old := connect(t, u.brokers[0], "alpha")
	if _, err := old.Announce(ctx, wire.Announcement{Service: "billing"}); err != nil {
		t.Fatal(err)
	}
	watcher := connect(t, u.brokers[2], "watcher")
	awaitWhois := func(want string) {
		t.Helper()
		testbroker.Await(t, busSettle, "billing "+want, func() error {
			list, err := watcher.Whois(ctx, "billing")
			if err != nil {
				return err
			}
			got := ""
			for _, s := range list {
				got += fmt.Sprintf("%s/%s/%d collision=%v;", s.Provenance.Node, s.IID, s.Provenance.Epoch, s.Collision)
			}
			if got != want {
				return fmt.Errorf("whois billing: %s", got)
			}
			return nil
		})
	}
	awaitWhois(fmt.Sprintf("alpha/%s/%d collision=false;", old.IID(), old.Epoch()))
	moved := connect(t, u.brokers[1], "alpha")
	select {
	case <-old.Done():
	case <-ctx.Done():
		t.Fatal("the old connection was not replaced")
	}
	if _, err := moved.Announce(ctx, wire.Announcement{Service: "billing"}); err != nil {
		t.Fatal(err)
	}
	awaitWhois(fmt.Sprintf("alpha/%s/%d collision=false;", moved.IID(), moved.Epoch()))
}
