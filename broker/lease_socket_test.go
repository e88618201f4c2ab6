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

// TestLeaseExpiry: a silent node is dropped after its lease, and counted;
// a real client, idle but heartbeating, stays. How soon after the lease
// is lease_test.go's subject, in virtual time; here the lease is long
// beside the heartbeat (socketLease), so a busy machine that delays a
// heartbeat does not cost the live client its lease.
func TestLeaseExpiry(t *testing.T) {
	const socketLease = 1500 * time.Millisecond // 15 heartbeats
	e := testbroker.Start(t, "unix", broker.Options{HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: socketLease})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "silent", "local", e.Secrets["local"])
	// A real client keeps its lease with heartbeats.
	live := connect(t, e, "live")
	testbroker.Eventually(t, time.Minute, "silent node dropped", func() bool { return len(e.Broker.Directory()) == 1 })
	// A second silent node is dropped a whole lease later: the live node,
	// sending nothing but heartbeats, must have kept its lease meanwhile.
	r2 := e.DialRaw(t)
	r2.Hello(t, wire.ProtocolVersion, "silent-2", "local", e.Secrets["local"])
	testbroker.Eventually(t, time.Minute, "second silent node dropped", func() bool {
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
// lease, and its services go with it. The lease is long beside the
// heartbeat, so the watcher keeps its own on a busy machine.
func TestServicesVanishWithTheLease(t *testing.T) {
	const socketLease = 1500 * time.Millisecond // 30 heartbeats
	e := testbroker.Start(t, "unix", broker.Options{HeartbeatInterval: 50 * time.Millisecond, LeaseTimeout: socketLease})
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
