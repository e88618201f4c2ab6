package bedrock_test

// busbar's State beside peers that behave as JavaScript add-ons do
// (package jsreplica): the Go replica must hold what the JavaScript
// replicas hold.

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"busbar/bedrock"
	"busbar/bedrock/internal/jsreplica"
	"busbar/state"
)

func startBus(t *testing.T, clock bedrock.Clock, w *bedrock.World, self string) *bedrock.Bus {
	t.Helper()
	b, err := bedrock.New(bedrock.Options{SelfID: self, Medium: w, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

// sameAs reports how the Go replica's namespace differs from a JavaScript
// replica's ("" when it does not).
func sameAs(goSide state.Snapshot, js map[string]jsreplica.Entry) string {
	if len(goSide.Entries) != len(js) {
		return fmt.Sprintf("%d entries, JavaScript %d", len(goSide.Entries), len(js))
	}
	for _, e := range goSide.Entries {
		j, ok := js[e.Key]
		if !ok || e.Version != j.Ver || e.Source != j.Src || e.Deleted != j.Del || string(e.Value) != string(j.Value) {
			return fmt.Sprintf("key %s: %s v%d from %s del %v, JavaScript %s v%d from %s del %v",
				e.Key, e.Value, e.Version, e.Source, e.Deleted, j.Value, j.Ver, j.Src, j.Del)
		}
	}
	return ""
}

// TestMirrorHoldsWhatJavaScriptReplicasHold: JavaScript add-ons (one with
// StrictOwnership) write their own namespaces and each other's, racing,
// on a world that duplicates and reorders; one starts late with empty
// state and writes once. A Go replica following every namespace holds
// exactly what each JavaScript replica holds, and has the late add-on's
// first write two ticks after it was sent.
func TestMirrorHoldsWhatJavaScriptReplicasHold(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { mixedWorld(t, seed) })
	}
}

func mixedWorld(t *testing.T, seed uint64) {
	clock := bedrock.NewSimClock()
	w := bedrock.NewWorld(clock, bedrock.WorldOptions{Duplicate: 0.2, Reorder: true, Seed: seed})
	mirror := bedrock.NewState(startBus(t, clock, w, "bedrock-bridge"), bedrock.StateOptions{ResyncTicks: bedrock.TicksPerSecond * 30})
	mirror.Follow("")
	const n = 4
	var js []*jsreplica.Replica
	for i := range n {
		r := jsreplica.New(startBus(t, clock, w, fmt.Sprint("addon", i)), jsreplica.Options{StrictOwnership: i == 3})
		r.Start()
		t.Cleanup(r.Stop)
		js = append(js, r)
	}
	clock.Advance(3)
	for round := range 6 {
		for i, r := range js {
			own, other := fmt.Sprint("addon", i), fmt.Sprint("addon", (i+1+round%(n-1))%n)
			if err := r.Set(own, fmt.Sprint("k", round%3), json.RawMessage(fmt.Sprint(i*100+round))); err != nil {
				t.Fatal(err)
			}
			err := r.Set(other, fmt.Sprint("k", round%2), json.RawMessage(fmt.Sprint(-i*100-round)))
			if i == 3 && !errors.Is(err, jsreplica.ErrNotOwned) || i != 3 && err != nil {
				t.Fatalf("addon%d writing %s: %v", i, other, err)
			}
			if round == 4 {
				_ = r.Delete(own, "k0")
			}
		}
		clock.Advance(int64(round % 2)) // some writes race within a tick
	}
	late := jsreplica.New(startBus(t, clock, w, "late"), jsreplica.Options{})
	late.Start()
	t.Cleanup(late.Stop)
	clock.Advance(3) // its request for every namespace, answered
	if err := late.Set("late", "hello", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2) // the flush, the delivery
	if e, ok := mirror.Get("late", "hello"); !ok || string(e.Value) != "1" {
		t.Fatalf("two ticks after the late add-on's first write, the mirror has %+v %v", e, ok)
	}
	clock.Advance(10)
	for i := range n + 1 {
		ns := fmt.Sprint("addon", i)
		if i == n {
			ns = "late"
		}
		got, ok := mirror.Snapshot(ns)
		if !ok {
			t.Fatalf("the mirror does not hold %s", ns)
		}
		for j, r := range append(js, late) {
			if diff := sameAs(got, r.Namespace(ns)); diff != "" {
				t.Fatalf("namespace %s, JavaScript replica %d: %s", ns, j, diff)
			}
		}
	}
	if mirror.Refused() != 0 {
		t.Fatalf("the mirror refused %d writes", mirror.Refused())
	}
}
