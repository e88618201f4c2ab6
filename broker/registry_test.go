package broker

// The service registry as nodes on pipes drive it, in virtual time
// (testing/synctest): when a connection's records leave.

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"busbar/wire"
)

// TestReplacedConnectionLeavesTheRegistry: when a node reconnects, the
// services of its replaced connection leave the registry at once, although
// that connection's writer is stuck on a peer that stopped reading
// (docs/discovery.md: "when the node ... is replaced by a newer connection
// of the same name ... its services go").
// (They used to go only when the old connection's reader ended, which waits
// up to WriteTimeout for the stuck writer; meanwhile resolve still picked
// the dead connection and its records counted in collisions.)
// One broker, in virtual time: a bus's NATS connections are real sockets,
// which a synctest bubble cannot wait on. Across brokers:
// TestBusServiceMovesWithItsNode.
func TestReplacedConnectionLeavesTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, secret := newTestBroker(t, Options{WriteTimeout: 4 * time.Second})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			_ = b.Shutdown(ctx)
		})
		old := join(t, b, secret, "alpha")
		t.Cleanup(func() { old.nc.Close() })
		if m := old.ask(t, wire.CmdAnnounce, "a", wire.Announcement{Service: "svc"}); m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("announce: %q", m)
		}
		// Ask for something and never read the answer: on a pipe the
		// broker's writer blocks at once.
		old.send(t, wire.New(wire.TypeRequest, wire.CmdWhois).WithHeader(wire.HeaderID, "w"))
		synctest.Wait() // the broker has answered and its writer is stuck
		again := join(t, b, secret, "alpha")
		t.Cleanup(func() { again.nc.Close() })
		go func() { _, _ = io.Copy(io.Discard, again.nc) }()
		synctest.Wait() // the replacement is complete; no virtual time passed
		if list := b.reg.services("svc"); len(list) != 0 {
			conns := b.reg.instances("svc")
			t.Fatalf("after alpha reconnected, the registry still holds its replaced connection's record (epoch %d, connection closing: %v)",
				list[0].Provenance.Epoch, len(conns) > 0 && conns[0].c.out.Closing())
		}
	})
}
