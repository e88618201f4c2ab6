package broker_test

// State permissions, checked by the broker per namespace: who may read
// (get, dump, watch), write (set, delete) and administer (create a
// namespace, open its keys), with ownership checked after permission.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/state"
	"busbar/wire"
)

// statePrincipals: "reader" may read cfg.*, "writer" may read and write
// cfg.* but not create or open, "maker" may also administer cfg.*.
func statePrincipals() []auth.Principal {
	return []auth.Principal{
		{Name: "reader", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			StateRead: []auth.Pattern{"cfg.*"},
		}},
		{Name: "writer", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			StateWrite: []auth.Pattern{"cfg.*"},
		}},
		{Name: "maker", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{
			StateRead: []auth.Pattern{"cfg.*"}, StateWrite: []auth.Pattern{"cfg.*"}, StateAdmin: []auth.Pattern{"cfg.*"},
		}},
	}
}

func as(principal string) func(*client.Options) {
	return func(o *client.Options) { o.Credential.Principal = principal }
}

// refused fails unless err is a REJECTED answer saying "not permitted to
// <action> namespace <ns>".
func refused(t *testing.T, what string, err error, action auth.Action, ns string) {
	t.Helper()
	var re *client.RequestError
	want := "not permitted to " + string(action) + " namespace " + ns
	if !errors.Is(err, client.ErrRejected) || !errors.As(err, &re) || !strings.HasPrefix(re.Text, want) {
		t.Fatalf("%s: %v, want REJECTED %q", what, err, want)
	}
}

// seed writes one key in each of cfg.app, cfg.app.x (one token past
// cfg.*), cfgx (one byte past "cfg") and billing, as node "owner" of the
// unrestricted principal on p.at(0), and opens cfg.app's "shared"; it
// returns once every broker holds them.
func seed(t *testing.T, p placement) *client.Client {
	t.Helper()
	owner := connect(t, p.at(0), "owner")
	for _, ns := range []string{"cfg.app", "cfg.app.x", "cfgx", "billing"} {
		if _, err := owner.State(ns).Set(ctxT(t, 5*time.Second), "k", "v-"+ns); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := owner.State("cfg.app").Open(ctxT(t, 5*time.Second), "shared"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, p, "cfg.app", "shared")
	return owner
}

// awaitState waits until an unrestricted node on every broker of p reads
// key of ns as the broker of p.at(0) holds it.
func awaitState(t *testing.T, p placement, ns, key string) {
	t.Helper()
	var readers []*client.Client
	for i, e := range p.brokers {
		readers = append(readers, connect(t, e, fmt.Sprint("checker", i)))
	}
	want, _, err := readers[0].State(ns).Get(ctxT(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range readers {
		p.settled(t, ns+"/"+key+" on "+r.Broker(), func() error {
			got, _, err := r.State(ns).Get(ctxT(t, 5*time.Second), key)
			if err != nil || got.Version != want.Version || got.Source != want.Source {
				return fmt.Errorf("%+v %v", got, err)
			}
			return nil
		})
		r.Close()
	}
}

// TestStateReadPermission: a principal that may read cfg.* gets and
// watches cfg.app, is refused billing and the namespaces just past its
// pattern, sees only what it may read in a dump, and may not write.
//
// On a bus the reader is on another broker than the owner, which checks
// its permissions and counts its refusals.
func TestStateReadPermission(t *testing.T) {
	eachTopology(t, testOpts(), testStateReadPermission, statePrincipals()...)
}

func testStateReadPermission(t *testing.T, p placement) {
	owner := seed(t, p)
	e := p.at(1)
	r := connect(t, e, "r", as("reader"))

	e1, found, err := r.State("cfg.app").Get(ctxT(t, 5*time.Second), "k")
	if err != nil || !found || string(e1.Value) != `"v-cfg.app"` {
		t.Fatalf("permitted get: %+v %v %v", e1, found, err)
	}
	if snap, err := r.State("cfg.app").Snapshot(ctxT(t, 5*time.Second)); err != nil || len(snap.Entries) != 2 {
		t.Fatalf("permitted snapshot: %+v %v", snap, err)
	}
	w, err := r.State("cfg.app").Watch(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("permitted watch: %v", err)
	}
	defer w.Close()
	if _, err := owner.State("cfg.app").Set(ctxT(t, 5*time.Second), "k", 2); err != nil {
		t.Fatal(err)
	}
	select {
	case ch := <-w.Changes():
		if ch.Key != "k" || string(ch.Value) != "2" {
			t.Fatalf("watched change: %+v", ch)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no change on a permitted watch")
	}

	before := e.Broker.Stats().Refused
	for _, ns := range []string{"billing", "cfg.app.x", "cfgx", "cfg"} {
		_, _, err := r.State(ns).Get(ctxT(t, 5*time.Second), "k")
		refused(t, "get "+ns, err, auth.ActionStateRead, ns)
		_, err = r.State(ns).Snapshot(ctxT(t, 5*time.Second))
		refused(t, "snapshot "+ns, err, auth.ActionStateRead, ns)
		_, err = r.State(ns).Watch(ctxT(t, 5*time.Second))
		refused(t, "watch "+ns, err, auth.ActionStateRead, ns)
	}
	_, err = r.State("cfg.app").Set(ctxT(t, 5*time.Second), "shared", 1)
	refused(t, "set by a reader", err, auth.ActionStateWrite, "cfg.app")
	_, err = r.State("cfg.app").Delete(ctxT(t, 5*time.Second), "shared")
	refused(t, "delete by a reader", err, auth.ActionStateWrite, "cfg.app")
	_, err = r.State("cfg.app").Open(ctxT(t, 5*time.Second), "k")
	refused(t, "open by a reader", err, auth.ActionStateAdmin, "cfg.app")
	if got := e.Broker.Stats().Refused - before; got != 15 {
		t.Errorf("Stats.Refused grew by %d, want 15", got)
	}

	// Every namespace: only those it may read.
	all, err := r.Snapshots(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.NS)
	}
	if !slices.Equal(names, []string{"cfg.app"}) {
		t.Fatalf("dump by a cfg.* reader: %q", names)
	}
	if all, err := owner.Snapshots(ctxT(t, 5*time.Second)); err != nil || len(all) != 4 {
		t.Fatalf("dump by an unrestricted node: %d namespaces, %v", len(all), err)
	}
}

// TestStateWritePermission: a principal that may write cfg.* writes the
// keys of cfg.app its owner opened, is refused billing by permission,
// closed keys by ownership, and creating or opening by state-admin; a
// write that loses does not show it a value it may not read.
//
// On a bus the writer is on another broker than the owner, and the stale
// writes on a third.
func TestStateWritePermission(t *testing.T) {
	eachTopology(t, testOpts(), testStateWritePermission, statePrincipals()...)
}

func testStateWritePermission(t *testing.T, p placement) {
	owner := seed(t, p)
	e := p.at(1)
	w := connect(t, e, "w", as("writer"))
	ctx := ctxT(t, 20*time.Second)

	if en, err := w.State("cfg.app").Set(ctx, "shared", 7); err != nil || string(en.Value) != "7" || en.Source != "w" {
		t.Fatalf("permitted write to an open key: %+v %v", en, err)
	}
	if _, err := w.State("cfg.app").Delete(ctx, "shared"); err != nil {
		t.Fatalf("permitted delete of an open key: %v", err)
	}
	// The owner's write below must follow the delete, not race it from
	// another broker (where the greater source would win a tie).
	p.settled(t, "the delete at the owner's broker", func() error {
		if e, _, err := owner.State("cfg.app").Get(ctx, "shared"); err != nil || !e.Deleted || e.Source != "w" {
			return fmt.Errorf("%+v %v", e, err)
		}
		return nil
	})
	// Permitted, but not the owner: ownership still decides.
	before := e.Broker.Stats().StateRefused
	_, err := w.State("cfg.app").Set(ctx, "k", 1)
	var re *client.RequestError
	if !errors.As(err, &re) || re.Kind != wire.ResultRejected || !strings.Contains(re.Text, "belongs to owner") {
		t.Fatalf("write to a closed key of another's namespace: %v", err)
	}
	if e.Broker.Stats().StateRefused != before+1 {
		t.Error("the ownership refusal was not counted in StateRefused")
	}
	_, err = w.State("billing").Set(ctx, "k", 1)
	refused(t, "write billing", err, auth.ActionStateWrite, "billing")
	_, err = w.State("cfgx").Set(ctx, "k", 1)
	refused(t, "write cfgx", err, auth.ActionStateWrite, "cfgx")
	_, err = w.State("cfg.new").Set(ctx, "k", 1)
	refused(t, "create cfg.new", err, auth.ActionStateAdmin, "cfg.new")
	_, err = w.State("cfg.app").Open(ctx, "k")
	refused(t, "open", err, auth.ActionStateAdmin, "cfg.app")
	_, _, err = w.State("cfg.app").Get(ctx, "k")
	refused(t, "get by a writer", err, auth.ActionStateRead, "cfg.app")
	if e.Broker.Stats().StateRefused != before+1 {
		t.Error("permission refusals were counted as ownership refusals")
	}
	if all, err := w.Snapshots(ctx); err != nil || len(all) != 0 {
		t.Fatalf("dump by a node that may read nothing: %+v %v", all, err)
	}

	// A write that loses is answered with the winner's version and
	// source, but its value only to a node that may read it.
	if _, err := owner.State("cfg.app").Set(ctx, "shared", "secret"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, p, "cfg.app", "shared")
	e = p.at(2)
	stale := state.Delta{NS: "cfg.app", Key: "shared", Value: json.RawMessage(`0`), Version: 1}
	for _, tc := range []struct {
		principal string
		value     string
	}{{"writer", ""}, {"maker", `"secret"`}} {
		raw := e.DialRaw(t)
		raw.Hello(t, wire.ProtocolVersion, "raw-"+tc.principal, tc.principal, e.Secrets[tc.principal])
		body, _ := json.Marshal(stale)
		raw.Send(t, wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, "s1").WithBody(body))
		m := readReply(t, raw, "s1")
		var res state.Result
		if err := json.Unmarshal(m.Body(), &res); err != nil || m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("%s: stale write: %q %v", tc.principal, m, err)
		}
		if res.Applied || res.Entry.Source != "owner" || res.Entry.Version < 2 || string(res.Entry.Value) != tc.value {
			t.Fatalf("%s: a stale write's answer: %+v, want the winner with value %q", tc.principal, res, tc.value)
		}
		raw.Conn.Close()
	}
}

// TestStateAdminPermission: creating a namespace and opening its keys
// need state-admin on it; its owner may then open keys, as before.
//
// On a bus the maker and the writer are on two brokers other than the
// seeding owner's.
func TestStateAdminPermission(t *testing.T) {
	eachTopology(t, testOpts(), testStateAdminPermission, statePrincipals()...)
}

func testStateAdminPermission(t *testing.T, p placement) {
	seed(t, p)
	mk := connect(t, p.at(1), "mk", as("maker"))
	w := connect(t, p.at(2), "w", as("writer"))
	ctx := ctxT(t, 20*time.Second)

	if _, err := mk.State("cfg.mine").Set(ctx, "k", 1); err != nil {
		t.Fatalf("create with state-admin: %v", err)
	}
	if snap, err := mk.State("cfg.mine").Snapshot(ctx); err != nil || snap.Owner != "mk" {
		t.Fatalf("created namespace: %+v %v", snap, err)
	}
	if _, err := mk.State("cfg.mine").Open(ctx, "k"); err != nil {
		t.Fatalf("owner opens with state-admin: %v", err)
	}
	p.settled(t, "the opened key on the writer's broker", func() error {
		if snap, err := mk.State("cfg.mine").Snapshot(ctx); err != nil || snap.Owner != "mk" {
			return fmt.Errorf("%+v %v", snap, err)
		}
		_, err := w.State("cfg.mine").Set(ctx, "k", 2)
		return err
	})
	// A namespace that does not exist yet is created by an open, too.
	if _, err := mk.State("cfg.other").Open(ctx, "k"); err != nil {
		t.Fatalf("open creating a namespace: %v", err)
	}
	_, err := mk.State("billing").Open(ctx, "k")
	refused(t, "open billing", err, auth.ActionStateAdmin, "billing")
	_, err = mk.State("cfg.a.b").Set(ctx, "k", 1)
	refused(t, "create cfg.a.b", err, auth.ActionStateWrite, "cfg.a.b")
	// Admin but not the owner: ownership decides.
	_, err = mk.State("cfg.app").Open(ctx, "k")
	var re *client.RequestError
	if !errors.As(err, &re) || !strings.Contains(re.Text, "only owner") {
		t.Fatalf("open in another's namespace: %v", err)
	}
}

// TestStateLegacyPrincipals: with a principals file from before the state
// lists, a principal that may use every channel keeps every namespace; one
// restricted to some channels gets no state. One broker: how a broker
// reads its own principals file.
func TestStateLegacyPrincipals(t *testing.T) {
	fullSecret, fullHash, _ := auth.NewSecret()
	partSecret, partHash, _ := auth.NewSecret()
	file := `{"principals": [
  {"name": "local", "secret_hash": "` + fullHash + `", "nodes": ["*"],
   "permissions": {"send": [">"], "request": [">"], "publish": [">"], "subscribe": [">"], "handle": [">"]}},
  {"name": "sensors", "secret_hash": "` + partHash + `", "nodes": ["*"],
   "permissions": {"publish": ["telemetry.>"], "subscribe": ["cfg.>"]}}
]}`
	path := filepath.Join(t.TempDir(), auth.PrincipalsFile)
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(store.Notes()) != 2 {
		t.Errorf("notes: %q", store.Notes())
	}
	e := testbroker.Start(t, "unix", broker.Options{Auth: store})
	full := connect(t, e, "full", func(o *client.Options) { o.Credential = auth.Credential{Principal: "local", Secret: fullSecret} })
	part := connect(t, e, "part", func(o *client.Options) { o.Credential = auth.Credential{Principal: "sensors", Secret: partSecret} })
	ctx := ctxT(t, 10*time.Second)

	if _, err := full.State("cfg.app").Set(ctx, "k", 1); err != nil {
		t.Fatalf("write by a legacy unrestricted principal: %v", err)
	}
	if _, err := full.State("cfg.app").Open(ctx, "k"); err != nil {
		t.Fatalf("open by a legacy unrestricted principal: %v", err)
	}
	if all, err := full.Snapshots(ctx); err != nil || len(all) != 1 {
		t.Fatalf("dump by a legacy unrestricted principal: %+v %v", all, err)
	}
	_, _, err = part.State("cfg.app").Get(ctx, "k")
	refused(t, "legacy restricted get", err, auth.ActionStateRead, "cfg.app")
	_, err = part.State("cfg.app").Set(ctx, "k", 2)
	refused(t, "legacy restricted write", err, auth.ActionStateWrite, "cfg.app")
	if all, err := part.Snapshots(ctx); err != nil || len(all) != 0 {
		t.Fatalf("dump by a legacy restricted principal: %+v %v", all, err)
	}
}

// TestStateInProcessUnrestricted: an in-process connection has no
// principal and, as with channels, may do everything. One broker: an
// in-process connection is to one broker.
func TestStateInProcessUnrestricted(t *testing.T) {
	e := testbroker.Start(t, "inproc", testOpts(), statePrincipals()...)
	c := connect(t, e, "inside", as("reader")) // in-process: the principal is not consulted
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.State("billing").Set(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State("billing").Open(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if all, err := c.Snapshots(ctx); err != nil || len(all) != 1 {
		t.Fatalf("%+v %v", all, err)
	}
}
