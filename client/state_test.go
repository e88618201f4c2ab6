package client_test

// Replicated state through the client: writes, conflicts and their rule,
// watches from a snapshot on, limits, and a store that survives restarts.
// watch_test.go checks watches that fall behind.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
	"busbar/state"
	"busbar/wire"
)

// nextChange reads one change of a state watch or fails.
func nextChange(t *testing.T, w *client.StateWatch) state.Entry {
	t.Helper()
	select {
	case e, ok := <-w.Changes():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no state change")
	}
	panic("unreachable")
}

// TestStateBasics: a write is read by another node, a foreign write to
// a closed key is refused and counted, an opened key takes anyone's
// write, a tombstone reads as deleted: with both nodes on one broker
// (every transport), and on two brokers of a bus.
func TestStateBasics(t *testing.T) {
	eachPlacement(t, func(t *testing.T, p testbus.Placement) {
		alpha := connect(t, p.At(0), "alpha")
		beta := connect(t, p.At(1), "beta")
		ctx := ctxT(t, 20*time.Second)
		lights := alpha.State("lights")
		if _, found, err := lights.Get(ctx, "hall"); err != nil || found {
			t.Fatalf("unknown key: %v %v", found, err)
		}
		en, err := lights.Set(ctx, "hall", map[string]bool{"on": true})
		if err != nil || string(en.Value) != `{"on":true}` || en.Source != "alpha" || en.Version == 0 {
			t.Fatalf("set: %+v %v", en, err)
		}
		p.Settled(t, "get from another node", func() error {
			got, found, err := beta.State("lights").Get(ctx, "hall")
			if err != nil || !found || !reflect.DeepEqual(got, en) {
				return fmt.Errorf("%+v %v %v", got, found, err)
			}
			return nil
		})
		// A foreign write to a closed key is refused and counted, by the
		// writer's broker.
		before := p.At(1).Broker.Stats().StateRefused
		if _, err := beta.State("lights").Set(ctx, "hall", "off"); !errors.Is(err, client.ErrRejected) || !strings.Contains(err.Error(), "belongs to alpha") {
			t.Fatalf("foreign write: %v", err)
		}
		if _, err := beta.State("lights").Open(ctx, "hall"); !errors.Is(err, client.ErrRejected) {
			t.Fatalf("foreign open: %v", err)
		}
		if n := p.At(1).Broker.Stats().StateRefused - before; n != 2 {
			t.Fatalf("refused counted %d", n)
		}
		// Opened, anyone may write it.
		if en, err := lights.Open(ctx, "hall"); err != nil || !en.Open || string(en.Value) != `{"on":true}` {
			t.Fatalf("open: %+v %v", en, err)
		}
		p.Settled(t, "the key open for another node", func() error {
			if got, _, err := beta.State("lights").Get(ctx, "hall"); err != nil || !got.Open {
				return fmt.Errorf("%+v %v", got, err)
			}
			return nil
		})
		if en, err := beta.State("lights").Set(ctx, "hall", "off"); err != nil || en.Source != "beta" || !en.Open {
			t.Fatalf("write to an open key: %+v %v", en, err)
		}
		p.Settled(t, "the open key's write back at its owner", func() error {
			if got, _, err := lights.Get(ctx, "hall"); err != nil || got.Source != "beta" {
				return fmt.Errorf("%+v %v", got, err)
			}
			return nil
		})
		// A tombstone reads as deleted and keeps the open flag.
		del, err := lights.Delete(ctx, "hall")
		if err != nil || !del.Deleted || del.Value != nil || !del.Open {
			t.Fatalf("delete: %+v %v", del, err)
		}
		p.Settled(t, "the tombstone read by another node", func() error {
			snap, err := beta.State("lights").Snapshot(ctx)
			if err != nil || snap.Owner != "alpha" || len(snap.Entries) != 1 || !snap.Entries[0].Deleted {
				return fmt.Errorf("snapshot: %+v %v", snap, err)
			}
			return nil
		})
		all, err := beta.Snapshots(ctx)
		if err != nil || len(all) != 1 || all[0].NS != "lights" {
			t.Fatalf("all snapshots: %+v %v", all, err)
		}
	})
}

// TestStateTombstoneAndTies drives the conflict rule over the wire with
// hand-picked versions: an older write does not resurrect a tombstone,
// and equal versions go to the greater node name. On a bus the two
// writers are on two brokers and the owner on a third, and each step is
// read back on every broker before the next: the rule is the same
// wherever a write is decided.
func TestStateTombstoneAndTies(t *testing.T) {
	eachPlacement(t, func(t *testing.T, p testbus.Placement) {
		owner := connect(t, p.At(0), "owner")
		ctx := ctxT(t, 20*time.Second)
		if _, err := owner.State("ns").Open(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		set := func(r *testbroker.Raw, id string, d state.Delta) state.Result {
			t.Helper()
			body, _ := json.Marshal(d)
			r.Send(t, wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, id).WithBody(body))
			m := r.Read(t)
			var res state.Result
			if m.Value(wire.HeaderRC) != "0" || json.Unmarshal(m.Body(), &res) != nil {
				t.Fatalf("%s: %q", id, m)
			}
			return res
		}
		raw := func(i int, node string) *testbroker.Raw {
			e := p.At(i)
			r := e.DialRaw(t)
			r.Hello(t, wire.ProtocolVersion, node, "local", e.Secrets["local"])
			return r
		}
		alice, bob := raw(1, "alice"), raw(2, "bob")
		readers := []*client.Client{owner, connect(t, p.At(1), "reader1"), connect(t, p.At(2), "reader2")}
		everywhere := func(what string, want state.Entry) {
			t.Helper()
			for _, c := range readers {
				p.Settled(t, what+" on "+c.Broker(), func() error {
					got, _, err := c.State("ns").Get(ctx, "k")
					if err != nil || got.Version != want.Version || got.Source != want.Source {
						return fmt.Errorf("%+v %v", got, err)
					}
					return nil
				})
			}
		}
		everywhere("the open key", state.Entry{Version: 1, Source: "owner"})
		steps := []struct {
			r       *testbroker.Raw
			d       state.Delta
			applied bool
			winner  string
		}{
			{alice, state.Delta{Value: json.RawMessage(`"a10"`), Version: 10}, true, "alice"},
			{bob, state.Delta{Value: json.RawMessage(`"b10"`), Version: 10}, true, "bob"},                     // tie: bob > alice
			{alice, state.Delta{Value: json.RawMessage(`"a10'"`), Version: 10}, false, "bob"},                 // tie: alice < bob
			{alice, state.Delta{Deleted: true, Version: 11}, true, "alice"},                                   // tombstone
			{bob, state.Delta{Value: json.RawMessage(`"late"`), Version: 9}, false, "alice"},                  // no resurrection
			{bob, state.Delta{Value: json.RawMessage(`"forged"`), Version: 12, Source: "owner"}, true, "bob"}, // src is stamped, not trusted
		}
		for i, s := range steps {
			s.d.NS, s.d.Key = "ns", "k"
			res := set(s.r, fmt.Sprint(i), s.d)
			if res.Applied != s.applied || res.Entry.Source != s.winner {
				t.Fatalf("step %d: %+v", i, res)
			}
			everywhere(fmt.Sprint("step ", i), res.Entry)
		}
		got, _, err := owner.State("ns").Get(ctx, "k")
		if err != nil || got.Source != "bob" || string(got.Value) != `"forged"` || got.Version != 12 {
			t.Fatalf("final: %+v %v", got, err)
		}
	})
}

// TestStateRacingWritersConverge: writers race on one open key while
// watchers replicate; every replica ends with the broker's entries. On a
// bus the writers and watchers are spread over the brokers, and every
// broker ends with the same entries too.
func TestStateRacingWritersConverge(t *testing.T) {
	eachPlacement(t, func(t *testing.T, p testbus.Placement) {
		ctx := ctxT(t, 30*time.Second)
		owner := connect(t, p.At(0), "owner")
		for _, k := range []string{"k1", "k2"} {
			if _, err := owner.State("race").Open(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		var watchers []*client.Client
		var watches []*client.StateWatch
		for i := range 3 {
			c := connect(t, p.At(i), fmt.Sprint("watcher", i))
			p.Settled(t, "the open keys on "+p.At(i).Broker.Name(), func() error {
				if snap, err := c.State("race").Snapshot(ctx); err != nil || len(snap.Entries) != 2 {
					return fmt.Errorf("%+v %v", snap, err)
				}
				return nil
			})
			w, err := c.State("race").Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			watchers, watches = append(watchers, c), append(watches, w)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			c := connect(t, p.At(i), fmt.Sprint("writer", i))
			wg.Go(func() {
				for j := range 40 {
					key := []string{"k1", "k2"}[j%2]
					var err error
					if j%7 == 6 {
						_, err = c.State("race").Delete(ctx, key)
					} else {
						_, err = c.State("race").Set(ctx, key, fmt.Sprint(c.Node(), "-", j))
					}
					if err != nil && !errors.Is(err, client.ErrSuperseded) {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		var final state.Snapshot
		p.Settled(t, "every broker with the same entries", func() error {
			var err error
			if final, err = owner.State("race").Snapshot(ctx); err != nil {
				return err
			}
			for _, c := range watchers {
				snap, err := c.State("race").Snapshot(ctx)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(snap.Entries, final.Entries) {
					return fmt.Errorf("%s's broker holds\n%+v\n%s's\n%+v", c.Node(), snap.Entries, owner.Node(), final.Entries)
				}
			}
			return nil
		})
		for i, w := range watches {
			replica := state.FromSnapshot(w.Initial())
			deadline := time.After(10 * time.Second)
			for !reflect.DeepEqual(replica.Snapshot().Entries, final.Entries) {
				select {
				case en := <-w.Changes():
					replica.Commit(en)
				case <-deadline:
					t.Fatalf("watcher %d did not converge:\n%+v\n%+v", i, replica.Snapshot().Entries, final.Entries)
				}
			}
		}
	})
}

// TestStateLateJoinerAndReconnect: a watch starts from exactly the current
// state, then gets each later change once, in order; a node that
// reconnects gets the current state again. One broker: it checks that
// broker's numbering of the deltas (Seq), which is each broker's own (a
// watch across brokers: TestStateWritesReachWatchersOnEveryBroker,
// TestStateRacingWritersConverge).
func TestStateLateJoinerAndReconnect(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	ctx := ctxT(t, 10*time.Second)
	owner := connect(t, e, "owner")
	ns := owner.State("cfg")
	for i := range 5 {
		if _, err := ns.Set(ctx, fmt.Sprint("key", i), i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ns.Delete(ctx, "key0"); err != nil {
		t.Fatal(err)
	}
	want, err := ns.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	late := connect(t, e, "late")
	w, err := late.State("cfg").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.Initial(), want) {
		t.Fatalf("initial:\n%+v\nwant\n%+v", w.Initial(), want)
	}
	var written []state.Entry
	for i := range 3 {
		en, err := ns.Set(ctx, "key1", fmt.Sprint("v", i))
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, en)
	}
	for i, en := range written {
		if got := nextChange(t, w); !reflect.DeepEqual(got, en) {
			t.Fatalf("change %d = %+v, want %+v", i, got, en)
		}
	}
	// Nothing more: the next change is a marker written now.
	marker, err := ns.Set(ctx, "marker", "m")
	if err != nil {
		t.Fatal(err)
	}
	if got := nextChange(t, w); !reflect.DeepEqual(got, marker) {
		t.Fatalf("change after the three = %+v, want the marker %+v (a duplicate?)", got, marker)
	}
	// Reconnect: a new connection of the same node watches again.
	late.Close()
	if _, ok := <-w.Changes(); ok || !errors.Is(w.Err(), client.ErrClosed) {
		t.Fatalf("watch after close: %v", w.Err())
	}
	again := connect(t, e, "late")
	w2, err := again.State("cfg").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	now, _ := ns.Snapshot(ctx)
	if !reflect.DeepEqual(w2.Initial(), now) || now.Seq != want.Seq+4 {
		t.Fatalf("after reconnect:\n%+v\nwant\n%+v", w2.Initial(), now)
	}
}

// TestStateSurvivesRestart: a broker with a store keeps every namespace,
// tombstones and open flags included, across a restart. (On a bus:
// broker.TestBusStateSurvivesABrokerRestart.)
func TestStateSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	start := func() (*broker.Broker, *client.Client) {
		b, err := broker.New(broker.Options{StatePath: path})
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.Connect(ctxT(t, 5*time.Second), client.Options{Node: "owner",
			Dial: func(context.Context) (net.Conn, error) { return b.DialInProcess() }})
		if err != nil {
			t.Fatal(err)
		}
		return b, c
	}
	stop := func(b *broker.Broker, c *client.Client) {
		c.Close()
		if err := b.Shutdown(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t, 10*time.Second)
	b, c := start()
	if _, err := c.State("a").Set(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State("a").Open(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State("b").Set(ctx, "gone", "soon"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State("b").Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	before, err := c.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop(b, c)
	b, c = start()
	defer stop(b, c)
	after, err := c.Snapshots(ctx)
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("after restart:\n%+v\nbefore\n%+v (%v)", after, before, err)
	}
	// The restarted broker continues the numbering and the ownership.
	en, err := c.State("b").Set(ctx, "gone", "back")
	if err != nil || en.Version != 3 { // past the tombstone's 2, found by the retry of a fresh client
		t.Fatalf("write after restart: %+v %v", en, err)
	}
	if s, _ := c.State("b").Snapshot(ctx); s.Seq != 3 || s.Owner != "owner" {
		t.Fatalf("seq after restart: %+v", s)
	}
}

// TestStateLimits: every limit of state at and past its edge. One broker:
// the writer's broker checks them, wherever the namespace is replicated.
func TestStateLimits(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	c := connect(t, e, "alpha")
	ctx := ctxT(t, 30*time.Second)
	okOrNot := func(what string, err error, ok bool) {
		t.Helper()
		if ok && err != nil || !ok && !errors.Is(err, client.ErrRejected) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := c.State("ns").Set(ctx, strings.Repeat("k", state.MaxKeyLen), 1)
	okOrNot("key at the limit", err, true)
	_, err = c.State("ns").Set(ctx, strings.Repeat("k", state.MaxKeyLen+1), 1)
	okOrNot("key past the limit", err, false)
	_, err = c.State("ns").Set(ctx, "v", strings.Repeat("x", state.MaxValueBytes-2))
	okOrNot("value at the limit", err, true)
	_, err = c.State("ns").Set(ctx, "v", strings.Repeat("x", state.MaxValueBytes-1))
	okOrNot("value past the limit", err, false)
	_, err = c.State(strings.Repeat("n", state.MaxNamespaceLen)).Set(ctx, "k", 1)
	okOrNot("namespace name at the limit", err, true)
	_, err = c.State(strings.Repeat("n", state.MaxNamespaceLen+1)).Set(ctx, "k", 1)
	okOrNot("namespace name past the limit", err, false)
	_, err = c.State("bad name").Set(ctx, "k", 1)
	okOrNot("namespace name with a space", err, false)
	// Namespaces per node: alpha owns 2 so far.
	for i := 2; i < broker.MaxNamespacesPerNode; i++ {
		_, err = c.State(fmt.Sprint("ns", i)).Set(ctx, "k", 1)
		okOrNot("namespace within the limit", err, true)
	}
	_, err = c.State("one-more").Set(ctx, "k", 1)
	okOrNot("namespace past the limit", err, false)
	_, err = c.State("ns").Set(ctx, "k2", 1)
	okOrNot("a namespace it owns", err, true)
	// The broker checks what a raw client sends, too.
	raw := e.DialRaw(t)
	raw.Hello(t, wire.ProtocolVersion, "rawnode", "local", e.Secrets["local"])
	for i, body := range []string{`{`, `{"ns":"r","key":"k","ver":0,"value":1}`, `{"ns":"r","key":"k","ver":1,"value":"x","del":true}`, `{"ns":"r","key":"k","ver":1}`} {
		raw.Send(t, wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, fmt.Sprint(i)).WithBody([]byte(body)))
		if m := raw.Read(t); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
			t.Fatalf("raw %s answered %q", body, m)
		}
	}
}

// TestStateWatchEnds: a watch ends with its context, and an unwatched
// namespace sends no more deltas. One broker: it is the client's and its
// own broker's affair.
func TestStateWatchEnds(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	c := connect(t, e, "alpha")
	ctx := ctxT(t, 10*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	w, err := c.State("ns").Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Initial().Entries) != 0 || w.Initial().Owner != "" {
		t.Fatalf("a namespace not yet written: %+v", w.Initial())
	}
	if _, err := c.State("ns").Set(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if en := nextChange(t, w); en.Key != "k" {
		t.Fatalf("change %+v", en)
	}
	cancel()
	for range w.Changes() {
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("err %v", w.Err())
	}
}

// TestStateWatchBufferEdge: a replica whose reader is behind holds
// StateWatchBuffer changes; one more ends it with ErrWatchOverflow. One
// broker: the buffer is the client's.
func TestStateWatchBufferEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	owner := connect(t, e, "owner")
	ctx := ctxT(t, 30*time.Second)
	w, err := connect(t, e, "watcher").State("ns").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range client.StateWatchBuffer {
		if _, err := owner.State("ns").Set(ctx, "k", i); err != nil {
			t.Fatal(err)
		}
	}
	testbroker.Eventually(t, 10*time.Second, "a full buffer", func() bool { return len(w.Changes()) == client.StateWatchBuffer })
	if err := w.Err(); err != nil {
		t.Fatalf("ended at the buffer's size: %v", err)
	}
	if _, err := owner.State("ns").Set(ctx, "k", "one more"); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "the overflow", func() bool { return errors.Is(w.Err(), client.ErrWatchOverflow) })
}

// rawSet writes a delta as a hand-driven node and returns the answer.
func rawSet(t *testing.T, r *testbroker.Raw, id string, d state.Delta) *wire.Message {
	t.Helper()
	body, _ := json.Marshal(d)
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, id).WithBody(body))
	return r.Read(t)
}

// TestStateMaxVersionStaysInItsNamespace: a node allowed to write one
// open key writes it at state.MaxVersion; once the owner has read that
// key, it can still write in its other namespaces.
// (The client's Lamport clock was one for every namespace, so every later
// Set of the owner computed MaxVersion+1 and its own Check refused it.)
// One broker: the clock is the client's.
func TestStateMaxVersionStaysInItsNamespace(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	owner := connect(t, e, "owner")
	ctx := ctxT(t, 5*time.Second)
	if _, err := owner.State("public").Open(ctx, "board"); err != nil {
		t.Fatal(err)
	}
	foe := e.DialRaw(t)
	foe.Hello(t, wire.ProtocolVersion, "foe", "local", e.Secrets["local"])
	if m := rawSet(t, foe, "1", state.Delta{NS: "public", Key: "board", Value: json.RawMessage(`"hi"`), Version: state.MaxVersion}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("write to the open key: %q", m)
	}
	if _, _, err := owner.State("public").Get(ctx, "board"); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.State("private").Set(ctx, "x", 1); err != nil {
		t.Fatalf("after reading another node's entry, the owner cannot write its own namespace: %v", err)
	}
}

// TestStateRawValueStoredVerbatim: a json.RawMessage value is stored as
// written, and one of exactly MaxValueBytes is accepted; another node
// reads the same bytes, on a bus through another broker.
// (json.Marshal of the delta HTML-escaped it, '<' becoming \u003c, so the
// broker stored other bytes and refused a value the client's check passed.)
func TestStateRawValueStoredVerbatim(t *testing.T) {
	eachPlacement(t, func(t *testing.T, p testbus.Placement) {
		c := connect(t, p.At(0), "alpha")
		reader := connect(t, p.At(1), "beta")
		ctx := ctxT(t, 20*time.Second)
		en, err := c.State("ns").Set(ctx, "k", json.RawMessage(`"<b>"`))
		if err != nil {
			t.Fatal(err)
		}
		if string(en.Value) != `"<b>"` {
			t.Errorf("stored value %s, written \"<b>\"", en.Value)
		}
		big := json.RawMessage(`"` + strings.Repeat("<", state.MaxValueBytes-2) + `"`)
		if _, err := c.State("ns").Set(ctx, "big", big); err != nil {
			t.Errorf("a value of exactly MaxValueBytes was refused: %.120v", err)
		}
		p.Settled(t, "another node to read both values verbatim", func() error {
			snap, err := reader.State("ns").Snapshot(ctx)
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, e := range snap.Entries {
				got[e.Key] = string(e.Value)
			}
			if got["k"] != `"<b>"` || got["big"] != string(big) {
				return fmt.Errorf("read %.60q and %d bytes", got["k"], len(got["big"]))
			}
			return nil
		})
	})
}

// TestStateWatchSeesADropAndTheNamespaceAgain: a watch whose namespace is
// dropped is told so (each key it held arrives deleted, with no version
// or source), stays live, and sees the namespace created again, whatever
// the versions of its new writes. On a bus the watcher, the owner, the
// admin and the new writer are spread over the brokers.
// (The resync merged the empty snapshot by the version rule and kept the
// old numbering: the dropped keys stayed, and the new namespace's first
// deltas were ignored as already seen.)
func TestStateWatchSeesADropAndTheNamespaceAgain(t *testing.T) {
	testbus.EachTopology(t, testOpts(), func(t *testing.T, p testbus.Placement) {
		owner := connect(t, p.At(0), "owner")
		watcher := connect(t, p.At(1), "watcher")
		admin := connect(t, p.At(2), "admin")
		ctx := ctxT(t, 20*time.Second)
		for i := range 3 {
			if _, err := owner.State("ns").Set(ctx, "k", i); err != nil {
				t.Fatal(err)
			}
		}
		p.Settled(t, "the writes on the watcher's and the admin's brokers", func() error {
			for _, c := range []*client.Client{watcher, admin} {
				if e, _, err := c.State("ns").Get(ctx, "k"); err != nil || string(e.Value) != "2" {
					return fmt.Errorf("%s reads %+v %v", c.Node(), e, err)
				}
			}
			return nil
		})
		w, err := watcher.State("ns").Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := admin.State("ns").Drop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := nextChange(t, w); got.Key != "k" || !got.Deleted || got.Version != 0 || got.Source != "" {
			t.Fatalf("after the drop the watch saw %+v, want k deleted", got)
		}
		p.Settled(t, "the drop on the writer's broker", func() error {
			if snap, err := owner.State("ns").Snapshot(ctx); err != nil || len(snap.Entries) != 0 {
				return fmt.Errorf("%+v %v", snap, err)
			}
			return nil
		})
		fresh := connect(t, p.At(0), "fresh")
		raw := p.At(0).DialRaw(t)
		raw.Hello(t, wire.ProtocolVersion, "low", "local", p.At(0).Secrets["local"])
		if m := rawSet(t, raw, "1", state.Delta{NS: "ns", Key: "k", Value: json.RawMessage(`"again"`), Version: 1}); m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("a write at version 1 to the namespace created again: %q", m)
		}
		if got := nextChange(t, w); got.Key != "k" || string(got.Value) != `"again"` || got.Source != "low" {
			t.Fatalf("the watch saw %+v, want the namespace's new k", got)
		}
		if _, err := fresh.State("ns").Open(ctx, "x"); err == nil { // "low" created it again, and owns it
			t.Fatal("a node that is not the new owner opened a key")
		}
		if w.Err() != nil {
			t.Fatalf("the watch ended: %v", w.Err())
		}
	})
}
