// Package testclient connects real clients to a test broker
// (internal/testbroker) for the tests that drive a broker from outside:
// package broker_test and package client_test share it. It is a package of
// its own because client's in-package tests use testbroker, which
// therefore cannot import client.
package testclient

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
)

// Connect registers node on e's broker as principal "local" (or the
// principal named by opts.Credential.Principal) and closes it at cleanup.
func Connect(t testing.TB, e *testbroker.Env, node string, mods ...func(*client.Options)) *client.Client {
	t.Helper()
	c, err := DialClient(e, node, mods...)
	if err != nil {
		t.Fatalf("connect %s: %v", node, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// DialClient connects node to e's broker as Connect does, returning the
// error instead of failing the test; the caller closes the client.
func DialClient(e *testbroker.Env, node string, mods ...func(*client.Options)) (*client.Client, error) {
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

// ConnectPausable connects node over e's (non-inproc) transport through a
// testbroker.PausableConn, so the test can make it stop reading.
func ConnectPausable(t *testing.T, e *testbroker.Env, node string) (*client.Client, *testbroker.PausableConn) {
	t.Helper()
	var pc *testbroker.PausableConn
	c := Connect(t, e, node, func(o *client.Options) {
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

// Ctx is a context that ends after d or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Inbox collects the events a subscription receives, for assertions.
type Inbox struct {
	mu   sync.Mutex
	msgs []*client.Message
}

// Handler is the subscription callback.
func (b *Inbox) Handler(_ context.Context, m *client.Message) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
}

// Len is how many events arrived.
func (b *Inbox) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// Get is the i-th event.
func (b *Inbox) Get(i int) *client.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.msgs[i]
}

// Droppable is a client's latest connection, which the test can cut: the
// client (ConnectDroppable's reconnects for ever) then dials the same
// broker again.
type Droppable struct {
	mu sync.Mutex
	nc net.Conn
}

// Drop closes the client's latest connection.
func (d *Droppable) Drop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.nc.Close()
}

// ConnectDroppable is Connect with a client that reconnects for ever,
// quickly (1 to 10 ms between attempts), through a dialer that keeps its
// latest connection for Drop.
func ConnectDroppable(t testing.TB, e *testbroker.Env, node string, mods ...func(*client.Options)) (*client.Client, *Droppable) {
	t.Helper()
	d := &Droppable{}
	c := Connect(t, e, node, append([]func(*client.Options){func(o *client.Options) {
		o.MaxReconnects = client.ReconnectForever
		o.ReconnectWaitMin, o.ReconnectWaitMax = time.Millisecond, 10*time.Millisecond
		o.Dial = func(ctx context.Context) (net.Conn, error) {
			nc, err := e.Dial(ctx)
			if err == nil {
				d.mu.Lock()
				d.nc = nc
				d.mu.Unlock()
			}
			return nc, err
		}
	}}, mods...)...)
	return c, d
}
