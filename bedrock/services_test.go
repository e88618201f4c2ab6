package bedrock

// RPC, discovery and replicated state on the bedrock bus, alone and among
// many nodes on a lossy world. rpc_test.go, discovery_test.go and
// state_test.go check their edge cases.

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func newBus(t *testing.T, clock *SimClock, w *World, self, iid string) *Bus {
	t.Helper()
	b, err := New(Options{SelfID: self, InstanceID: iid, Medium: w, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

func TestRPC(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	server := NewRPC(newBus(t, clock, w, "calc", "c1"))
	client := NewRPC(newBus(t, clock, w, "ui", "u1"))
	server.Handle("add", func(params json.RawMessage, from *Envelope) (any, error) {
		var xs []int
		if err := json.Unmarshal(params, &xs); err != nil {
			return nil, err
		}
		return xs[0] + xs[1], nil
	})
	server.Handle("fail", func(json.RawMessage, *Envelope) (any, error) { return nil, errors.New("nope") })
	type result struct {
		res Response
		err error
	}
	var results []result
	collect := func(res Response, err error) { results = append(results, result{res, err}) }
	client.Go("calc", "add", []int{2, 3}, 0, collect)
	client.Go("calc", "fail", nil, 0, collect)
	client.Go("calc", "nosuch", nil, 0, collect)
	client.Go("ghost", "add", []int{1, 1}, 0, collect) // nobody answers
	clock.Advance(10)
	if len(results) != 3 {
		t.Fatalf("%d results after 10 ticks", len(results))
	}
	if r := results[0]; r.err != nil || !r.res.OK || string(r.res.Data) != "5" {
		t.Fatalf("add: %+v", r)
	}
	if r := results[1]; r.res.OK || r.res.Err != "nope" {
		t.Fatalf("fail: %+v", r)
	}
	if r := results[2]; r.res.OK || r.res.Err != "unknown method 'nosuch'" {
		t.Fatalf("unknown: %+v", r)
	}
	clock.Advance(DefaultRPCTimeoutTicks - 11)
	if len(results) != 3 {
		t.Fatal("timed out early")
	}
	clock.Advance(1)
	if len(results) != 4 || !errors.Is(results[3].err, ErrRPCTimeout) {
		t.Fatalf("timeout: %+v", results)
	}
	// A response cannot arrive on the tick the request was sent.
	client.Go("calc", "add", []int{1, 1}, 0, collect)
	clock.Advance(1)
	if len(results) != 4 {
		t.Fatal("answered within a tick")
	}
}

// TestLoopbackRPC: a call to this add-on itself is answered without the
// medium, one tick per hop.
func TestLoopbackRPC(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	r := NewRPC(newBus(t, clock, w, "self", "s1"))
	r.Handle("echo", func(p json.RawMessage, from *Envelope) (any, error) { return p, nil })
	var got *Response
	r.Go("self", "echo", "hi", 0, func(res Response, err error) {
		if err == nil {
			got = &res
		}
	})
	clock.Advance(1) // the request reaches the handler, which replies
	if got != nil {
		t.Fatal("answered inline")
	}
	clock.Advance(1)
	if got == nil || !got.OK || string(got.Data) != `"hi"` || w.Sent() != 0 {
		t.Fatalf("loopback rpc: %+v, %d on the medium", got, w.Sent())
	}
}

func TestDiscovery(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	var events []string
	a := NewDiscovery(newBus(t, clock, w, "lights", "a1"), AnnounceData{Version: "1.0.0", SchemaVersion: 2}, func(ev PeerEvent) {
		events = append(events, fmt.Sprint(ev.Op, " ", ev.Peer.Src, "/", ev.Peer.IID))
	})
	bBus := newBus(t, clock, w, "door", "b1")
	b := NewDiscovery(bBus, AnnounceData{Version: "0.3.0", Meta: json.RawMessage(`{"room":"hall"}`)}, nil)
	clock.Advance(5)
	if peers := a.Peers(); len(peers) != 1 || peers[0].Src != "door" || string(peers[0].Meta) != `{"room":"hall"}` || peers[0].Version != "0.3.0" {
		t.Fatalf("a sees %+v", peers)
	}
	if peers := b.Peers(); len(peers) != 1 || peers[0].SchemaVersion != 2 {
		t.Fatalf("b sees %+v", peers)
	}
	// A twin: same src, another instance. Both heard, flagged.
	NewDiscovery(newBus(t, clock, w, "door", "b2"), AnnounceData{Version: "0.3.1"}, nil)
	clock.Advance(5)
	if c := a.Collisions(); !reflect.DeepEqual(c, []string{"door"}) || len(a.Peers()) != 2 {
		t.Fatalf("collisions %v peers %+v", c, a.Peers())
	}
	// door's first instance goes silent: gone after PeerTimeoutTicks.
	b.Close()
	bBus.Stop()
	clock.Advance(PeerTimeoutTicks + EvictionIntervalTicks + AnnounceIntervalTicks)
	peers := a.Peers()
	if len(peers) != 1 || peers[0].IID != "b2" {
		t.Fatalf("after silence: %+v", peers)
	}
	want := []string{"up door/b1", "up door/b2", "collision door/b2", "gone door/b1"}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events %v", events)
	}
}

// TestStateAmongNodes: an owner and replicas on one world, with the
// JavaScript bus's rule: every add-on's write applies everywhere by
// last-write-wins, a write to a namespace not heard of yet too, and a late
// joiner gets the snapshot.
func TestStateAmongNodes(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	owner := NewState(newBus(t, clock, w, "thermo", "t1"), StateOptions{})
	var changes []string
	rep := NewState(newBus(t, clock, w, "phone", "p1"), StateOptions{OnChange: func(c StateChange) {
		changes = append(changes, fmt.Sprintf("%s=%s", c.Entry.Key, c.Entry.Value))
	}})
	if err := owner.Own("home"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3)
	if _, err := owner.Set("home", "target", json.RawMessage(`20.5`)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3)
	if e, ok := rep.Get("home", "target"); !ok || string(e.Value) != "20.5" || e.Source != "thermo" {
		t.Fatalf("replica %+v %v", e, ok)
	}
	if _, err := rep.Set("home", "target", json.RawMessage(`25`)); err != nil {
		t.Fatalf("a write to another add-on's namespace: %v", err)
	}
	clock.Advance(3)
	if e, _ := owner.Get("home", "target"); string(e.Value) != "25" || e.Source != "phone" {
		t.Fatalf("owner has %+v", e)
	}
	// A raw delta from an add-on no one has heard of applies too.
	intruder := newBus(t, clock, w, "intruder", "x")
	body, _ := json.Marshal(deltaData{NS: "home", Key: "secret", Value: json.RawMessage(`1`), Ver: 999})
	intruder.Send(SendOptions{Type: TypeStateDelta, Data: body})
	clock.Advance(3)
	if e, ok := owner.Get("home", "secret"); !ok || e.Source != "intruder" || e.Version != 999 {
		t.Fatalf("owner has %+v %v", e, ok)
	}
	// A late joiner asks and gets exactly the owner's state.
	late := NewState(newBus(t, clock, w, "tablet", "l1"), StateOptions{})
	late.Follow("home")
	clock.Advance(4)
	a, _ := owner.Snapshot("home")
	b, _ := late.Snapshot("home")
	if !reflect.DeepEqual(a.Entries, b.Entries) || b.Owner != "thermo" {
		t.Fatalf("late joiner:\n%+v\n%+v", b, a)
	}
	if want := []string{"target=20.5", "target=25", "secret=1"}; !reflect.DeepEqual(changes, want) {
		t.Fatalf("changes %v", changes)
	}
}

// TestManyNodesOnALossyWorld: discovery, RPC and state among twelve Go
// nodes on a world that loses, duplicates and reorders messages.
func TestManyNodesOnALossyWorld(t *testing.T) {
	for _, seed := range []uint64{42, 7, 1234, 99} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { lossyWorld(t, seed) })
	}
}

func lossyWorld(t *testing.T, seed uint64) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{Loss: 0.05, Duplicate: 0.05, Reorder: true, PerTick: 80, Seed: seed})
	const n = 12
	var (
		discs  []*Discovery
		rpcs   []*RPC
		states []*State
	)
	for i := range n {
		b := newBus(t, clock, w, fmt.Sprint("addon", i), fmt.Sprint("i", i))
		discs = append(discs, NewDiscovery(b, AnnounceData{Version: "1"}, nil))
		r := NewRPC(b)
		r.Handle("who", func(json.RawMessage, *Envelope) (any, error) { return b.SelfID(), nil })
		rpcs = append(rpcs, r)
		states = append(states, NewState(b, StateOptions{ResyncTicks: 60}))
	}
	if err := states[0].Own("shared"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20)
	for _, s := range states[1:] {
		s.Follow("shared")
	}
	clock.Advance(20)
	for i := range 10 {
		key := fmt.Sprint("k", i)
		if _, err := states[0].Set("shared", key, json.RawMessage(`0`)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(150) // past two resyncs
	// Racing writers.
	for round := range 5 {
		for i := 1; i < n; i++ {
			if _, err := states[i].Set("shared", fmt.Sprint("k", (i+round)%10), json.RawMessage(fmt.Sprint(i*100+round))); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
		clock.Advance(3)
	}
	// RPC between every pair, retried on loss.
	answered := 0
	for i := range n {
		for j := range n {
			dst := fmt.Sprint("addon", j)
			var try func(int)
			try = func(left int) {
				rpcs[i].Go(dst, "who", nil, 40, func(res Response, err error) {
					switch {
					case err == nil && res.OK && string(res.Data) == `"`+dst+`"`:
						answered++
					case left > 0:
						try(left - 1)
					}
				})
			}
			try(5)
		}
	}
	clock.Advance(3 * PeerTimeoutTicks)
	if answered != n*n {
		t.Fatalf("%d of %d calls answered", answered, n*n)
	}
	for i, d := range discs {
		if len(d.Peers()) != n-1 {
			t.Fatalf("node %d knows %d peers", i, len(d.Peers()))
		}
	}
	want, _ := states[0].Snapshot("shared")
	for i, s := range states {
		got, ok := s.Snapshot("shared")
		if !ok || !reflect.DeepEqual(got.Entries, want.Entries) {
			t.Fatalf("node %d diverged:\n%+v\nowner:\n%+v", i, got.Entries, want.Entries)
		}
	}
	if len(want.Entries) != 10 {
		t.Fatalf("%d entries", len(want.Entries))
	}
}

// TestStateValuesStoredAsReplicasDecode: a value written with whitespace
// and HTML characters is stored by the writer exactly as the replicas
// decode it from the wire.
func TestStateValuesStoredAsReplicasDecode(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	owner := NewState(newBus(t, clock, w, "o", "o1"), StateOptions{})
	rep := NewState(newBus(t, clock, w, "r", "r1"), StateOptions{})
	if err := owner.Own("n"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3)
	e, err := owner.Set("n", "k", json.RawMessage(`{ "html": "<b>&</b>",  "n": [1, 2] }`))
	if err != nil || string(e.Value) != `{"html":"<b>&</b>","n":[1,2]}` {
		t.Fatalf("stored %s %v", e.Value, err)
	}
	clock.Advance(3)
	got, ok := rep.Get("n", "k")
	if !ok || !reflect.DeepEqual(got, e) {
		t.Fatalf("replica %+v, owner %+v", got, e)
	}
	if _, err := owner.Set("n", "k", json.RawMessage(`{`)); err == nil {
		t.Fatal("invalid JSON stored")
	}
}
