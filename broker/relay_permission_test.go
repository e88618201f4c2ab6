package broker_test

// Pushing to the durable relay takes its disk: only a principal given the
// relay permission (or one allowed every channel) may push.

import (
	"fmt"
	"strings"
	"testing"

	"busbar/auth"
	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func TestRelayPushNeedsTheRelayPermission(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()},
		auth.Principal{Name: "telemetry", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{Publish: []auth.Pattern{"telemetry.>"}}},
		auth.Principal{Name: "pusher", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{Relay: true}},
	)
	alice, bob := identity(t), identity(t)
	for _, tc := range []struct {
		principal string
		ok        bool
	}{
		{"telemetry", false}, // publish only: no relay
		{"pusher", true},     // the relay permission alone
		{"local", true},      // every channel: the owner
	} {
		r := e.DialRaw(t)
		if m := r.Hello(t, wire.ProtocolVersion, tc.principal+"-node", tc.principal, e.Secrets[tc.principal]); wire.ResponseRC(m).IsError() {
			t.Fatalf("hello as %s: %v", tc.principal, m)
		}
		m := ask(t, r, wire.CmdDurablePush, "p", sealedTo(t, alice, bob, "hello"))
		switch {
		case tc.ok && m.Value(wire.HeaderRC) != "0":
			t.Fatalf("%s's push: %v", tc.principal, m)
		case !tc.ok && (m.Value(wire.HeaderResult) != string(wire.Rejected) || !strings.Contains(m.Value(wire.HeaderError), "--relay")):
			t.Fatalf("%s's push: %v, want REJECTED naming --relay", tc.principal, m)
		}
	}
	if st, ok := e.Broker.RelayStats(); !ok || st.Blobs != 2 {
		t.Fatalf("relay holds %+v, want the 2 permitted pushes", st)
	}
}

// Each principal has a quota of bytes pushed into the relay: a burst of
// it is taken, the next byte past it is RATE_LIMITED, and a principal
// allowed every channel has none.
func TestRelayPushQuotaPerPrincipal(t *testing.T) {
	alice, bob := identity(t), identity(t)
	blob := sealedTo(t, alice, bob, "hello")
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir(), RelayQuotaRate: 1, RelayQuotaBurst: 2 * len(blob)},
		auth.Principal{Name: "pusher", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{Relay: true}})
	push := func(principal string, n int) *wire.Message {
		r := e.DialRaw(t)
		if m := r.Hello(t, wire.ProtocolVersion, principal+"-node", principal, e.Secrets[principal]); wire.ResponseRC(m).IsError() {
			t.Fatalf("hello as %s: %v", principal, m)
		}
		var m *wire.Message
		for i := range n {
			if m = ask(t, r, wire.CmdDurablePush, fmt.Sprint("p", i), blob); i < n-1 && m.Value(wire.HeaderRC) != "0" {
				t.Fatalf("%s's push %d: %v", principal, i, m)
			}
		}
		return m
	}
	if m := push("pusher", 2); m.Value(wire.HeaderRC) != "0" { // exactly the burst
		t.Fatalf("a push at the quota: %v", m)
	}
	if m := push("pusher", 1); m.Value(wire.HeaderResult) != string(wire.ResultRateLimited) || !strings.Contains(m.Value(wire.HeaderError), "quota") {
		t.Fatalf("a push past the quota: %v", m)
	}
	if m := push("local", 5); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("the owner's push: %v", m)
	}
}
