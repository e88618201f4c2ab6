package bedrock

// Discovery on the bedrock bus beyond services_test.go: instances that
// share a src.

import (
	"slices"
	"testing"
)

// TestDiscoveryTwinSeesItsOwnCollision: an instance tells that another
// one uses its src (the seed filters echoes by iid because "a colliding
// twin announcing your id is still delivered, which is how collisions are
// detectable at all"), for as long as both run, and never lists itself.
// (Echoes were filtered by src, so a twin went unseen.)
func TestDiscoveryTwinSeesItsOwnCollision(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	var events []string
	d1 := NewDiscovery(newBus(t, clock, w, "door", "b1"), AnnounceData{Version: "1"}, func(ev PeerEvent) {
		events = append(events, ev.Op+" "+ev.Peer.Src+"/"+ev.Peer.IID)
	})
	clock.Advance(5)
	NewDiscovery(newBus(t, clock, w, "door", "b2"), AnnounceData{Version: "1"}, nil)
	clock.Advance(AnnounceIntervalTicks + 5)
	if c := d1.Collisions(); !slices.Equal(c, []string{"door"}) {
		t.Errorf("door/b1 collisions %v, events %v", c, events)
	}
	for _, p := range d1.Peers() {
		if p.IID == "b1" {
			t.Errorf("door/b1 lists itself as a peer: %+v (events %v)", d1.Peers(), events)
		}
	}
	// Both twins keep running: the collision is still there.
	clock.Advance(2 * PeerTimeoutTicks)
	if c := d1.Collisions(); !slices.Equal(c, []string{"door"}) {
		t.Errorf("later, with both twins alive: door/b1 collisions %v, peers %+v, events %v", c, d1.Peers(), events)
	}
}
