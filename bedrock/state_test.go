package bedrock

// Replicated state on the bedrock bus beyond services_test.go: which
// deltas a replica takes, and owners that restart.

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"busbar/state"
)

// TestStateDeltaKeysMatchExactly: a state-delta's ver is data.ver; a
// "VER" key is another property. Go replicas store what JavaScript
// replicas store, or they would never converge.
// (Go's case-insensitive JSON decoding used to take "VER".)
func TestStateDeltaKeysMatchExactly(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	owner := NewState(newBus(t, clock, w, "o", "o1"), StateOptions{})
	if err := owner.Own("n"); err != nil {
		t.Fatal(err)
	}
	replica := NewState(newBus(t, clock, w, "r", "r1"), StateOptions{})
	replica.Follow("n")
	clock.Advance(5)
	twin := newBus(t, clock, w, "o", "o2") // the owner's src, as any sender may write it
	twin.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"n","key":"k","value":1,"ver":5,"VER":999}`)})
	clock.Advance(3)
	e, ok := replica.Get("n", "k")
	if !ok || e.Version != 5 {
		t.Fatalf("replica stored %+v (ok %v); JavaScript stores ver 5", e, ok)
	}
}

// TestStateOwnerRestart: an add-on that owns a namespace restarts (a new
// instance, empty state: a script reload) while a long-lived replica (the
// bridge) keeps its copy; the owner's new writes reach the replica, even
// with periodic resync.
// (The restarted owner's writes used to never reach the replica: owner
// and replica did not converge.)
func TestStateOwnerRestart(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	ob := newBus(t, clock, w, "o", "o1")
	owner := NewState(ob, StateOptions{})
	owner.Own("n")
	replica := NewState(newBus(t, clock, w, "r", "r1"), StateOptions{ResyncTicks: 20})
	replica.Follow("n")
	clock.Advance(3)
	for i := range 5 {
		owner.Set("n", "k", json.RawMessage(fmt.Sprint(i)))
	}
	clock.Advance(3)
	if e, _ := replica.Get("n", "k"); string(e.Value) != "4" {
		t.Fatalf("before the restart the replica has %+v", e)
	}
	owner.Close()
	ob.Stop()
	owner2 := NewState(newBus(t, clock, w, "o", "o2"), StateOptions{})
	owner2.Own("n")
	clock.Advance(3)
	owner2.Set("n", "k", json.RawMessage(`"after restart"`))
	clock.Advance(100)
	o, _ := owner2.Get("n", "k")
	r, _ := replica.Get("n", "k")
	if string(o.Value) != string(r.Value) {
		t.Fatalf("never converge: owner %s (ver %d), replica %s (ver %d)", o.Value, o.Version, r.Value, r.Version)
	}
}

// TestStateRefusedDeltaDoesNotPushTheClock: package state's rule is that
// "a refused write must not push" the Lamport clock: one delta from
// anyone, for a namespace nobody holds, with ver 2^53-1, leaves the owner
// able to write its own keys.
// (It pushed the clock to its end, and the owner's second write failed.)
func TestStateRefusedDeltaDoesNotPushTheClock(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	owner := NewState(newBus(t, clock, w, "o", "o1"), StateOptions{})
	if err := owner.Own("n"); err != nil {
		t.Fatal(err)
	}
	prank := newBus(t, clock, w, "x", "x1")
	prank.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"nobody-holds-this","key":"k","value":1,"ver":9007199254740991}`)})
	clock.Advance(3)
	if _, err := owner.Set("n", "k", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	if e, err := owner.Set("n", "k", json.RawMessage(`2`)); err != nil {
		t.Fatalf("the owner's second write: %v (entry %+v)", err, e)
	}
}

// TestFirstDeltaAsksForTheRestOfTheNamespace: a replica that hears a
// delta of a followed namespace it does not hold yet (its request for
// every namespace was lost) applies it at once and asks for that
// namespace, so the keys written before arrive within a few ticks, not at
// the next resync.
func TestFirstDeltaAsksForTheRestOfTheNamespace(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	lamp := newBus(t, clock, w, "lamp", "l1")
	var asked []string
	lamp.On(TypeStateRequest, func(e *Envelope) {
		asked = append(asked, string(e.Data))
		lamp.Send(SendOptions{Dst: e.Src, Type: TypeStateSnapshot, Data: json.RawMessage(
			`{"ns":"lamp","entries":[{"k":"a","v":1,"ver":1,"src":"lamp"},{"k":"b","v":2,"ver":2,"src":"lamp"}]}`)})
	})
	rep := NewState(newBus(t, clock, w, "bridge", "b1"), StateOptions{ResyncTicks: 600})
	rep.mu.Lock()
	rep.follow[""] = true // as if its state-req {} had been lost
	rep.mu.Unlock()
	lamp.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"lamp","key":"b","value":2,"ver":2}`)})
	clock.Advance(2) // the delta's flush, then its delivery
	if e, ok := rep.Get("lamp", "b"); !ok || string(e.Value) != "2" || e.Source != "lamp" {
		t.Fatalf("after the delta the replica has %+v %v", e, ok)
	}
	clock.Advance(4) // the request out and in, the snapshot out and in
	if len(asked) != 1 || asked[0] != `{"ns":"lamp"}` {
		t.Fatalf("lamp was asked %q", asked)
	}
	snap, _ := rep.Snapshot("lamp")
	if len(snap.Entries) != 2 || snap.Owner != "lamp" {
		t.Fatalf("replica holds %+v", snap)
	}
}

// TestStrictOwnership: with StrictOwnership an add-on writes only the
// namespaces it owns; it still applies every other add-on's writes.
func TestStrictOwnership(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	strict := NewState(newBus(t, clock, w, "s", "s1"), StateOptions{StrictOwnership: true})
	open := NewState(newBus(t, clock, w, "o", "o1"), StateOptions{})
	if err := open.Own("theirs"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3)
	if _, err := strict.Set("theirs", "k", json.RawMessage(`1`)); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("a strict write to another's namespace: %v", err)
	}
	if _, err := strict.Delete("nobody", "k"); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("a strict write to an unknown namespace: %v", err)
	}
	if err := strict.Own("mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Set("mine", "k", json.RawMessage(`1`)); err != nil {
		t.Fatalf("a strict write to its own namespace: %v", err)
	}
	clock.Advance(3)
	if _, err := open.Set("mine", "k", json.RawMessage(`2`)); err != nil {
		t.Fatalf("an open add-on's write to another's namespace: %v", err)
	}
	clock.Advance(3)
	if e, _ := strict.Get("mine", "k"); string(e.Value) != "2" || e.Source != "o" {
		t.Fatalf("the strict owner holds %+v, not the other add-on's write", e)
	}
	if strict.Refused() != 0 || open.Refused() != 0 {
		t.Fatalf("refused %d/%d", strict.Refused(), open.Refused())
	}
}

// TestStateMaxKeysEdge: a replica takes writes of new keys up to
// state.MaxKeys per namespace (tombstones included), refuses (and counts)
// the next, and still takes new versions of the keys it holds.
func TestStateMaxKeysEdge(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	rep := NewState(newBus(t, clock, w, "r", "r1"), StateOptions{})
	rep.Follow("n")
	rep.mu.Lock()
	n := state.New("n", "w")
	for i := range state.MaxKeys {
		e := state.Entry{Key: fmt.Sprint("k", i), Version: 1, Source: "w", Deleted: i%2 == 0}
		if !e.Deleted {
			e.Value = json.RawMessage(`1`)
		}
		if _, err := put(n, e); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	rep.spaces["n"] = n
	rep.mu.Unlock()
	writer := newBus(t, clock, w, "w", "w1")
	writer.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"n","key":"one-too-many","value":1,"ver":2}`)})
	writer.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"n","key":"k1","value":2,"ver":2}`)})
	clock.Advance(3)
	if _, ok := rep.Get("n", "one-too-many"); ok || rep.Refused() != 1 {
		t.Fatalf("a key past MaxKeys: stored %v, refused %d", ok, rep.Refused())
	}
	if e, _ := rep.Get("n", "k1"); string(e.Value) != "2" {
		t.Fatalf("an existing key at MaxKeys: %+v", e)
	}
}
