package broker

// The test binary fails if a test leaves a goroutine behind. This file also
// holds the helpers of the in-package tests: hand-driven nodes on in-memory
// pipes, so a test can reach the broker's internals and run in a synctest
// bubble. The tests in package broker_test drive the broker over real
// sockets with the real client instead (see helpers_test.go).

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"busbar/auth"
	"busbar/internal/leakcheck"
	"busbar/wire"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

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

// ask sends one control request as n and returns the broker's answer.
func (n *rawNode) ask(t *testing.T, cmd, id string, body any) *wire.Message {
	t.Helper()
	raw, _ := json.Marshal(body)
	n.send(t, wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, id).WithBody(raw))
	_ = n.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		m, err := n.r.ReadMessage()
		if err != nil {
			t.Fatalf("%s %s: %v", cmd, id, err)
		}
		if m.IsHeartbeat() || m.Value(wire.HeaderReplyTo) != id {
			continue
		}
		return m
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
