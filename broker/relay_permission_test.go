package broker_test

// Pushing to the durable relay takes its disk: only a principal given the
// relay permission (or one allowed every channel) may push.

import (
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
