package client_test

// The test binary fails if a test leaves a goroutine behind; the helpers
// here connect real clients to a real broker (internal/testbroker).

import (
	"context"
	"net"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/leakcheck"
	"busbar/internal/testbroker"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

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

// eachTransport runs body against a fresh broker on every transport.
func eachTransport(t *testing.T, body func(t *testing.T, e *testbroker.Env)) {
	for _, scheme := range testbroker.Transports {
		t.Run(scheme, func(t *testing.T) {
			body(t, testbroker.Start(t, scheme, testOpts()))
		})
	}
}
