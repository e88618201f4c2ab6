package broker

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"busbar/auth"
	"busbar/wire"
)

// rawNode is a hand-driven node on an in-memory pipe, so the test can run
// in a synctest bubble with virtual time.
type rawNode struct {
	nc net.Conn
	r  *wire.Reader
	w  *wire.Writer
}

func (n *rawNode) send(t testing.TB, m *wire.Message) {
	t.Helper()
	if err := n.w.WriteMessage(m); err != nil {
		t.Fatal(err)
	}
	if err := n.w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// newTestBroker returns a broker whose principal "p" (secret returned)
// may be any node.
func newTestBroker(t testing.TB, opts Options) (*Broker, string) {
	t.Helper()
	secret, hash, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	store, err := auth.NewStore([]auth.Principal{{Name: "p", SecretHash: hash, Nodes: []auth.Pattern{"*"}, Permissions: auth.AllPermissions()}})
	if err != nil {
		t.Fatal(err)
	}
	opts.Auth = store
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return b, secret
}

// join serves one end of a pipe as a (not in-process) node and says hello.
func join(t testing.TB, b *Broker, secret, node string) *rawNode {
	t.Helper()
	cl, srv := net.Pipe()
	go b.ServeConn(srv)
	n := &rawNode{nc: cl, r: wire.NewReader(cl), w: wire.NewWriter(cl)}
	if _, err := n.r.ReadMessage(); err != nil { // bus.info
		t.Fatal(err)
	}
	body, _ := json.Marshal(wire.Hello{Node: node, Principal: "p", Secret: secret})
	n.send(t, wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body))
	if m, err := n.r.ReadMessage(); err != nil || m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("hello: %v %q", err, m)
	}
	return n
}

func registered(b *Broker, node string) bool { return b.dir.lookup(node) != nil }

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
			time.Sleep(period)
			synctest.Wait()
			if time.Since(start) <= b.opts.LeaseTimeout && !registered(b, "silent") {
				t.Fatalf("silent node dropped after %v, before its lease of %v", time.Since(start), b.opts.LeaseTimeout)
			}
			alive.send(t, wire.Empty())
		}
		time.Sleep(period + time.Millisecond)
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
