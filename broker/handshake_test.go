package broker_test

// The opening exchange: who the broker admits, and how it refuses the rest.

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestAuthentication: the broker admits a node only with the right
// credential (a secret or a key) for a node name its principal may take,
// never the broker's own name, and says no the same way to an unknown
// principal and a wrong secret.
func TestAuthentication(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts(),
		auth.Principal{Name: "workers", Nodes: []auth.Pattern{"worker-*"}, Permissions: auth.AllPermissions()})
	cases := []struct {
		name string
		mod  func(*client.Options)
		node string
	}{
		{"wrong secret", func(o *client.Options) { o.Credential.Secret = "nope" }, "alpha"},
		{"unknown principal", func(o *client.Options) { o.Credential = auth.Credential{Principal: "ghost", Secret: "x"} }, "alpha"},
		{"node not allowed", func(o *client.Options) { o.Credential.Principal = "workers" }, "alpha"},
		{"broker's own name", nil, e.Broker.Name()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mods []func(*client.Options)
			if c.mod != nil {
				mods = append(mods, c.mod)
			}
			cl, err := dialClient(e, c.node, mods...)
			if !errors.Is(err, client.ErrAuth) {
				if cl != nil {
					cl.Close()
				}
				t.Fatalf("err = %v, want ErrAuth", err)
			}
		})
	}
	// Right credentials work, including a public key and a node pattern.
	connect(t, e, "worker-1", func(o *client.Options) { o.Credential.Principal = "workers" })
	connect(t, e, "signer", func(o *client.Options) {
		o.Credential = auth.Credential{Principal: "pk"}
		o.PrivateKey = e.Keys["pk"]
	})
	// Unknown principal and wrong secret look the same to the client.
	_, err1 := dialClient(e, "alpha", func(o *client.Options) { o.Credential.Secret = "nope" })
	_, err2 := dialClient(e, "alpha", func(o *client.Options) { o.Credential = auth.Credential{Principal: "ghost", Secret: "x"} })
	if err1.Error() != err2.Error() {
		t.Fatalf("distinguishable: %q vs %q", err1, err2)
	}
	if n := len(e.Broker.Directory()); n != 2 {
		t.Fatalf("%d nodes registered, want 2", n)
	}
}

// TestIncompatibleVersion: a hello of another protocol version is refused
// with VERSION, naming it, and the connection closes unregistered.
func TestIncompatibleVersion(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	r := e.DialRaw(t)
	if r.Info.Protocol != wire.ProtocolVersion {
		t.Fatalf("broker announces %q", r.Info.Protocol)
	}
	m := r.Hello(t, "2", "future", "local", e.Secrets["local"])
	if m.Value(wire.HeaderResult) != string(wire.ResultVersion) || !strings.Contains(m.Value(wire.HeaderError), `"2"`) {
		t.Fatalf("answer %q", m)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("connection left open")
	}
	if len(e.Broker.Directory()) != 0 {
		t.Fatal("incompatible peer registered")
	}
}

// TestHandshakeWithPeerNotReading: the connection's writer may fail and
// log while the handshake sets the node name (a peer that shut its read
// side makes the broker's writes fail); run with -race. A peer that is
// gone is counted as a write failure, never as a slow consumer.
// (The writer used to read the node name unguarded: a data race.)
func TestHandshakeWithPeerNotReading(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	path := strings.TrimPrefix(e.Endpoint, "unix://")
	body, _ := json.Marshal(wire.Hello{Node: "racer", Principal: "local", Secret: e.Secrets["local"]})
	hello, _ := wire.AppendFrame(nil, wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body))
	for i := range 100 {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		uc := nc.(*net.UnixConn)
		_ = uc.CloseRead() // the broker's writes now fail with EPIPE
		_, _ = uc.Write(hello)
		// The broker's writer fails (and logs) while its reader handles
		// the hello; the socket stays open until it has.
		testbroker.Eventually(t, 5*time.Second, "the broker's write to fail", func() bool {
			return e.Broker.Stats().WriteFailures > int64(i)
		})
		uc.Close()
	}
	if n := e.Broker.Stats().SlowConsumers; n != 0 {
		t.Fatalf("%d peers that were gone counted as slow consumers", n)
	}
	testbroker.Eventually(t, 5*time.Second, "racers gone", func() bool { return len(e.Broker.Directory()) == 0 })
}
