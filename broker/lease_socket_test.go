package broker_test

// Leases over a real socket: a node that stops sending loses its lease and
// everything it held; the real client keeps its lease with heartbeats.
// lease_test.go checks the edges in virtual time.

import (
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestLeaseExpiry: a silent node is dropped soon after its lease, and
// counted; a real client, idle but heartbeating, stays.
func TestLeaseExpiry(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "silent", "local", e.Secrets["local"])
	// A real client keeps its lease with heartbeats.
	live := connect(t, e, "live")
	start := time.Now()
	testbroker.Eventually(t, 5*time.Second, "silent node dropped", func() bool { return len(e.Broker.Directory()) == 1 })
	if took := time.Since(start); took > 300*time.Millisecond+2*time.Second {
		t.Fatalf("dead peer detected after %v", took)
	}
	// A second silent node is dropped a whole lease later: the live node,
	// sending nothing but heartbeats, must have kept its lease meanwhile.
	r2 := e.DialRaw(t)
	r2.Hello(t, wire.ProtocolVersion, "silent-2", "local", e.Secrets["local"])
	testbroker.Eventually(t, 5*time.Second, "second silent node dropped", func() bool {
		return e.Broker.Stats().LeaseExpired >= 2 && len(e.Broker.Directory()) == 1
	})
	if d := e.Broker.Directory(); len(d) != 1 || d[0].Node != "live" {
		t.Fatalf("directory %+v", d)
	}
	if live.Err() != nil {
		t.Fatal(live.Err())
	}
	if n := e.Broker.Stats().LeaseExpired; n != 2 {
		t.Fatalf("lease expiries counted: %d, want 2", n)
	}
}

// TestServicesVanishWithTheLease: a node that stops heartbeating loses its
// lease, and its services go with it.
func TestServicesVanishWithTheLease(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{HeartbeatInterval: 50 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond})
	watcher := connect(t, e, "watcher")
	ctx := ctxT(t, 10*time.Second)
	w, err := watcher.WatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	raw := e.DialRaw(t) // never heartbeats
	raw.Hello(t, wire.ProtocolVersion, "silent", "local", e.Secrets["local"])
	raw.Send(t, wire.New(wire.TypeRequest, wire.CmdAnnounce).WithHeader(wire.HeaderID, "1").WithBody([]byte(`{"service":"ghost"}`)))
	expectEvents(t, w, "up ghost@silent collision=false")
	expectEvents(t, w, "down ghost@silent collision=false")
	if list, err := watcher.Whois(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("after the lease: %+v %v", list, err)
	}
}
