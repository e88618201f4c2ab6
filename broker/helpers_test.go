package broker_test

// Helpers of the tests that drive the broker from outside, over real
// sockets, with the real client (busbar/client) and hand-driven raw
// connections (testbroker.Raw): what the broker decides — limits, leases,
// slow consumers, shutdown, replaced connections, handshakes, permissions,
// routing — seen as nodes see it.

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func testOpts() broker.Options { return broker.Options{} }

// connect registers node on e's broker as principal "local" (or the
// principal named by opts.Credential.Principal) and closes it at cleanup.
func connect(t testing.TB, e *testbroker.Env, node string, mods ...func(*client.Options)) *client.Client {
	t.Helper()
	c, err := dialClient(e, node, mods...)
	if err != nil {
		t.Fatalf("connect %s: %v", node, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dialClient(e *testbroker.Env, node string, mods ...func(*client.Options)) (*client.Client, error) {
	opts := client.Options{Node: node, Server: e.Endpoint, TLS: e.ClientTLS, Credential: auth.Credential{Principal: "local"}}
	if e.Scheme == "inproc" {
		opts.Dial = func(context.Context) (net.Conn, error) { return e.Broker.DialInProcess() }
	}
	for _, m := range mods {
		m(&opts)
	}
	if opts.Credential.Secret == "" && opts.PrivateKey == nil {
		opts.Credential.Secret = e.Secrets[opts.Credential.Principal]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.Connect(ctx, opts)
}

// connectPausable connects node over e's (non-inproc) transport through a
// testbroker.PausableConn, so the test can make it stop reading.
func connectPausable(t *testing.T, e *testbroker.Env, node string) (*client.Client, *testbroker.PausableConn) {
	t.Helper()
	var pc *testbroker.PausableConn
	c := connect(t, e, node, func(o *client.Options) {
		o.Dial = func(ctx context.Context) (net.Conn, error) {
			nc, err := e.Dial(ctx)
			if err != nil {
				return nil, err
			}
			pc = &testbroker.PausableConn{Conn: nc}
			return pc, nil
		}
	})
	t.Cleanup(pc.Resume)
	return c, pc
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// inbox collects events for assertions.
type inbox struct {
	mu   sync.Mutex
	msgs []*client.Message
}

func (b *inbox) handler(_ context.Context, m *client.Message) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
}

func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

func (b *inbox) get(i int) *client.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.msgs[i]
}

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
