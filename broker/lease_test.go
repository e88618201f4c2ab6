package broker

// Leases in virtual time (testing/synctest) over in-memory pipes: the
// edges of LeaseTimeout and of the broker's heartbeats. lease_socket_test.go
// checks leases over a real socket with the real client.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"busbar/wire"
)

// TestLeaseEdge: a silent node keeps its lease for LeaseTimeout and loses
// it within one sweep period after; a node that heartbeats keeps it; the
// broker heartbeats an idle connection within 1.5 heartbeat intervals.
func TestLeaseEdge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, secret := newTestBroker(t, Options{HeartbeatInterval: 2 * time.Second, LeaseTimeout: 6 * time.Second})
		silent := join(t, b, secret, "silent")
		alive := join(t, b, secret, "alive")
		// Nodes read what the broker sends (heartbeats), so its writes never block.
		heartbeats := make(chan time.Time, 100)
		for _, n := range []*rawNode{silent, alive} {
			go func() {
				for {
					m, err := n.r.ReadMessage()
					if err != nil {
						return
					}
					if m.IsHeartbeat() && n == alive {
						heartbeats <- time.Now()
					}
				}
			}()
		}
		start := time.Now()
		period := b.sweepPeriod()
		for time.Since(start) < b.opts.LeaseTimeout {
			time.Sleep(period) // virtual time: the sweeps are the subject
			synctest.Wait()
			if time.Since(start) <= b.opts.LeaseTimeout && !registered(b, "silent") {
				t.Fatalf("silent node dropped after %v, before its lease of %v", time.Since(start), b.opts.LeaseTimeout)
			}
			alive.send(t, wire.Empty())
		}
		time.Sleep(period + time.Millisecond) // virtual time: one sweep past the lease
		synctest.Wait()
		if registered(b, "silent") {
			t.Fatalf("silent node still registered %v after it went silent", time.Since(start))
		}
		if !registered(b, "alive") {
			t.Fatal("a heartbeating node lost its lease")
		}
		if b.Stats().LeaseExpired != 1 {
			t.Fatalf("lease expiries counted: %d", b.Stats().LeaseExpired)
		}
		// The broker heartbeats idle connections.
		select {
		case <-heartbeats:
		default:
			t.Fatal("the broker sent no heartbeat to an idle node")
		}
		_ = silent.nc.Close()
		_ = alive.nc.Close()
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
