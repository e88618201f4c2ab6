package broker_test

import (
	"testing"
	"time"

	"busbar/client"
	"busbar/wire"
)

// TestBusCollisionAcrossBrokersRaisesTheSameEvents: a service name
// announced on two brokers is a collision with the events of one broker
// (docs/discovery.md#collisions), seen by watchers on every broker, the
// two announcers' and a third; when one instance goes, the other's
// collision is over everywhere.
func TestBusCollisionAcrossBrokersRaisesTheSameEvents(t *testing.T) {
	u := startBus(t)
	caller, alpha, beta := connect(t, u.brokers[0], "caller"), connect(t, u.brokers[1], "alpha"), connect(t, u.brokers[2], "beta")
	ctx := ctxT(t, 20*time.Second)
	var ws []*client.ServiceWatch
	for _, c := range []*client.Client{caller, alpha, beta} {
		w, err := c.WatchServices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	if info, err := alpha.Announce(ctx, wire.Announcement{Service: "cache"}); err != nil || info.Collision {
		t.Fatalf("first: %+v %v", info, err)
	}
	for _, w := range ws {
		expectEvents(t, w, "up cache@alpha collision=false")
	}
	if info, err := beta.Announce(ctx, wire.Announcement{Service: "cache"}); err != nil || !info.Collision {
		t.Fatalf("second: %+v %v", info, err)
	}
	for _, w := range ws {
		expectEvents(t, w,
			"up cache@beta collision=true",
			"collision cache@alpha collision=true",
			"collision cache@beta collision=true")
	}
	// Shares keep being republished (every heartbeat): nothing more is
	// told until something changes.
	if _, err := caller.Announce(ctx, wire.Announcement{Service: "marker"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		expectEvents(t, w, "up marker@caller collision=false")
	}
	if err := beta.Withdraw(ctx, "cache"); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		expectEvents(t, w, "down cache@beta collision=true", "up cache@alpha collision=false")
	}
}
