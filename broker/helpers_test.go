package broker_test

// Helpers of the tests that drive the broker from outside, over real
// sockets, with the real client (busbar/client) and hand-driven raw
// connections (testbroker.Raw): what the broker decides — limits, leases,
// slow consumers, shutdown, replaced connections, handshakes, permissions,
// routing — seen as nodes see it.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/wire"
)

func testOpts() broker.Options { return broker.Options{} }

// The shared helpers of the tests that drive a broker with real clients.
var (
	connect         = testclient.Connect
	dialClient      = testclient.DialClient
	connectPausable = testclient.ConnectPausable
	ctxT            = testclient.Ctx
)

type inbox = testclient.Inbox

func echo(_ context.Context, m *client.Message) ([]byte, error) { return m.Payload(), nil }

// readReply reads until the answer to id arrives (receipts of the node's
// own deliveries may interleave).
func readReply(t *testing.T, r *testbroker.Raw, id string) *wire.Message {
	t.Helper()
	for {
		m := r.Read(t)
		if m.Value(wire.HeaderReplyTo) == id {
			return m
		}
	}
}

// expectEvents reads len(want) registry events and compares op, service,
// node and collision flag, in order.
func expectEvents(t *testing.T, w *client.ServiceWatch, want ...string) {
	t.Helper()
	for i, wantEv := range want {
		var ev wire.ServiceEvent
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			ev = e
		case <-time.After(5 * time.Second):
			t.Fatal("no registry event")
		}
		got := fmt.Sprintf("%s %s@%s collision=%v", ev.Op, ev.Service.Service, ev.Service.Provenance.Node, ev.Service.Collision)
		if got != wantEv {
			t.Fatalf("event %d = %q, want %q", i, got, wantEv)
		}
	}
}

// noRetry makes Connect return the broker's first refusal.
func noRetry(o *client.Options) { o.RefusedRetry = client.NoRefusedRetry }
