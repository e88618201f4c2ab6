package broker_test

// What the broker stamps is the broker's on the paths that store and
// replay, as on the live ones (routing_test.go): a state write's source
// and sequence number are the broker's whatever the writer sent, in the
// store, in a later reader's snapshot, and after a restart.

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"busbar/internal/testbroker"
	"busbar/state"
	"busbar/wire"
)

func TestStateWriteCannotForgeItsSource(t *testing.T) {
	opts := testOpts()
	opts.StatePath = filepath.Join(t.TempDir(), "state.db")
	e := testbroker.Start(t, "tcp", opts)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "writer", "local", e.Secrets["local"])
	body, _ := json.Marshal(state.Delta{NS: "cfg", Key: "k", Value: json.RawMessage(`1`), Version: 1, Source: "broker", Seq: 99})
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, "w").WithBody(body))
	if a := readReply(t, r, "w"); a.Value(wire.HeaderRC) != "0" {
		t.Fatalf("the write was refused: %v", a)
	}
	check := func(e *testbroker.Env, when string) {
		t.Helper()
		reader := connect(t, e, "reader-"+when)
		got, found, err := reader.State("cfg").Get(ctxT(t, 10*time.Second), "k")
		if err != nil || !found {
			t.Fatalf("%s: get: %v, found %v", when, err, found)
		}
		if got.Source != "writer" {
			t.Fatalf("%s: the stored source is %q; want the writer's node, not what it sent", when, got.Source)
		}
	}
	check(e, "live")
	if err := e.Broker.Shutdown(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	check(testbroker.Start(t, "tcp", opts), "restarted")
}
