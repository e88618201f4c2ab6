package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestConvergesInAnyOrder applies the same writes (racing writers, equal
// versions, deletes) in many shuffled orders: every replica ends with the
// same entries, and each key holds its greatest (version, source).
func TestConvergesInAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	writers := []string{"owner", "alice", "bob"}
	var opens []Delta
	for i, k := range keys {
		opens = append(opens, Delta{NS: "ns", Key: k, Value: json.RawMessage(`0`), Version: uint64(i + 1), Source: "owner", Open: true})
	}
	var writes []Delta
	for i := range 200 {
		d := Delta{NS: "ns", Key: keys[rng.IntN(len(keys))], Version: uint64(4 + rng.IntN(20)), Source: writers[rng.IntN(len(writers))]}
		if rng.IntN(5) == 0 {
			d.Deleted = true
		} else {
			d.Value = json.RawMessage(fmt.Sprint(i))
		}
		writes = append(writes, d)
	}
	// What the rule says each key must end with: the greatest (ver, src),
	// and among writes with that same pair the first one applied wins —
	// so make pairs unique by dropping later duplicates.
	seen := map[string]bool{}
	unique := writes[:0]
	for _, d := range writes {
		id := fmt.Sprint(d.Key, d.Version, d.Source)
		if !seen[id] {
			seen[id] = true
			unique = append(unique, d)
		}
	}
	writes = unique
	want := map[string]Delta{}
	for _, d := range writes {
		if w, ok := want[d.Key]; !ok || Wins(d.Version, d.Source, w.Version, w.Source) {
			want[d.Key] = d
		}
	}
	var first Snapshot
	for round := range 50 {
		n := New("ns", "owner")
		for _, d := range opens {
			if _, err := n.Apply(d); err != nil {
				t.Fatal(err)
			}
		}
		order := rng.Perm(len(writes))
		for _, i := range order {
			if _, err := n.Apply(writes[i]); err != nil && !errors.Is(err, ErrStale) {
				t.Fatal(err)
			}
		}
		s := n.Snapshot()
		if round == 0 {
			first = s
			for _, e := range s.Entries {
				w := want[e.Key]
				if e.Version != w.Version || e.Source != w.Source || e.Deleted != w.Deleted || string(e.Value) != string(w.Value) || !e.Open {
					t.Fatalf("%s = %+v, want %+v", e.Key, e, w)
				}
			}
			continue
		}
		if !reflect.DeepEqual(s, first) {
			t.Fatalf("round %d diverged:\n%+v\n%+v", round, s, first)
		}
	}
}

func TestLimits(t *testing.T) {
	n := New("ns", "o")
	apply := func(d Delta) error {
		d.NS, d.Source = "ns", "o"
		if d.Version == 0 {
			d.Version = n.Clock() + 1
		}
		_, err := n.Apply(d)
		return err
	}
	cases := []struct {
		name string
		d    Delta
		ok   bool
	}{
		{"key at the limit", Delta{Key: strings.Repeat("k", MaxKeyLen), Value: json.RawMessage(`1`)}, true},
		{"key past the limit", Delta{Key: strings.Repeat("k", MaxKeyLen+1), Value: json.RawMessage(`1`)}, false},
		{"empty key", Delta{Key: "", Value: json.RawMessage(`1`)}, false},
		{"key with a space", Delta{Key: "a b", Value: json.RawMessage(`1`)}, false},
		{"key with a control character", Delta{Key: "a\u0085b", Value: json.RawMessage(`1`)}, false},
		{"value at the limit", Delta{Key: "v", Value: json.RawMessage(`"` + strings.Repeat("x", MaxValueBytes-2) + `"`)}, true},
		{"value past the limit", Delta{Key: "v", Value: json.RawMessage(`"` + strings.Repeat("x", MaxValueBytes-1) + `"`)}, false},
		{"value not JSON", Delta{Key: "v", Value: json.RawMessage(`{`)}, false},
		{"write without a value", Delta{Key: "v"}, false},
		{"delete with a value", Delta{Key: "v", Deleted: true, Value: json.RawMessage(`1`)}, false},
	}
	for _, c := range cases {
		if err := apply(c.d); (err == nil) != c.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := n.Apply(Delta{NS: "ns", Key: "zero", Value: json.RawMessage(`1`), Source: "o"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("version 0: %v", err)
	}
	if _, err := n.Apply(Delta{NS: "ns", Key: "max", Value: json.RawMessage(`1`), Source: "o", Version: MaxVersion}); err != nil {
		t.Errorf("version at the limit: %v", err)
	}
	if _, err := n.Apply(Delta{NS: "ns", Key: "max", Value: json.RawMessage(`1`), Source: "o", Version: MaxVersion + 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("version past the limit: %v", err)
	}
	// A refused foreign write does not move the clock.
	m := New("ns", "o")
	if _, err := m.Apply(Delta{NS: "ns", Key: "k", Value: json.RawMessage(`1`), Source: "o", Version: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(Delta{NS: "ns", Key: "k", Value: json.RawMessage(`1`), Source: "intruder", Version: MaxVersion}); !errors.Is(err, ErrForeign) || m.Clock() != 1 {
		t.Errorf("foreign write: %v, clock 1 → %d", err, m.Clock())
	}
	for _, ns := range []string{strings.Repeat("n", MaxNamespaceLen), "a.b-c_d"} {
		if err := CheckName(ns); err != nil {
			t.Errorf("namespace %q: %v", ns, err)
		}
	}
	for _, ns := range []string{"", strings.Repeat("n", MaxNamespaceLen+1), "a b", "a\nb"} {
		if err := CheckName(ns); err == nil {
			t.Errorf("namespace %q accepted", ns)
		}
	}
	// Keys per namespace, tombstones included.
	full := New("ns", "o")
	for i := range MaxKeys {
		d := Delta{NS: "ns", Key: fmt.Sprint("k", i), Version: 1, Source: "o", Value: json.RawMessage(`1`)}
		if i%2 == 0 {
			d.Value, d.Deleted = nil, true
		}
		if _, err := full.Apply(d); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := full.Apply(Delta{NS: "ns", Key: "one-more", Version: 1, Source: "o", Value: json.RawMessage(`1`)}); !errors.Is(err, ErrFull) {
		t.Fatalf("key %d: %v", MaxKeys+1, err)
	}
	if _, err := full.Apply(Delta{NS: "ns", Key: "k1", Version: 2, Source: "o", Value: json.RawMessage(`2`)}); err != nil {
		t.Fatalf("overwriting in a full namespace: %v", err)
	}
}

func TestFromSnapshotRoundTrip(t *testing.T) {
	n := New("ns", "o")
	for i, d := range []Delta{
		{Key: "a", Value: json.RawMessage(`{"x":1}`), Version: 3},
		{Key: "b", Deleted: true, Version: 5},
		{Key: "c", Value: json.RawMessage(`"s"`), Version: 7, Open: true},
	} {
		d.NS, d.Source = "ns", "o"
		if _, err := n.Apply(d); err != nil {
			t.Fatal(i, err)
		}
		n.Advance()
	}
	s := n.Snapshot()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	m := FromSnapshot(back)
	if !reflect.DeepEqual(m.Snapshot(), s) || m.Clock() != 7 || m.Seq() != 3 || m.Owner() != "o" {
		t.Fatalf("round trip: %+v vs %+v", m.Snapshot(), s)
	}
	if !strings.Contains(string(b), `"entries":[{"k":"a","v":{"x":1},"ver":3,"src":"o"},{"k":"b","ver":5,"src":"o","del":true},{"k":"c","v":"s","ver":7,"src":"o","open":true}]`) {
		t.Fatalf("wire form: %s", b)
	}
}

// FuzzApply feeds arbitrary deltas (as JSON off the wire) to a namespace:
// nothing panics, what applies wins over what was stored, and a replica
// that follows the numbered deltas ends equal to the namespace.
func FuzzApply(f *testing.F) {
	f.Add([]byte(`{"ns":"n","key":"k","value":1,"ver":1,"src":"owner"}`), []byte(`{"ns":"n","key":"k","ver":2,"del":true,"src":"x"}`))
	f.Add([]byte(`{"ns":"n","key":"k","value":"v","ver":5,"src":"owner","open":true}`), []byte(`{"ns":"n","key":"k","value":[1],"ver":5,"src":"zed"}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		n, replica := New("n", "owner"), New("n", "owner")
		for _, raw := range [][]byte{a, b, a} {
			var d Delta
			if json.Unmarshal(raw, &d) != nil {
				continue
			}
			before, had := n.Get(d.Key)
			e, err := n.Apply(d)
			if err != nil {
				if after, _ := n.Get(d.Key); had && !reflect.DeepEqual(after, before) {
					t.Fatalf("a refused delta changed %q", d.Key)
				}
				continue
			}
			if had && !Wins(e.Version, e.Source, before.Version, before.Source) {
				t.Fatalf("%+v replaced the winning %+v", e, before)
			}
			if _, _, gap := replica.Follow(n.Delta(e, n.Advance())); gap {
				t.Fatal("gap in consecutive deltas")
			}
		}
		if !reflect.DeepEqual(replica.Snapshot().Entries, n.Snapshot().Entries) {
			t.Fatalf("replica %+v, namespace %+v", replica.Snapshot(), n.Snapshot())
		}
	})
}
