package client

import (
	"context"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/state"
)

// TestStateGapResync makes a replica miss deltas (it stops taking them
// for a while, as if its queue had overflowed), then checks that the next
// delta's number gives the gap away, that the replica asks the real broker
// for a snapshot, and that the application sees the current value once and
// every later change.
func TestStateGapResync(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{})
	dial := func(node string) *Client {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := Connect(ctx, Options{Node: node, Server: e.Endpoint,
			Credential: auth.Credential{Principal: "local", Secret: e.Secrets["local"]}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	owner, watcher := dial("owner"), dial("watcher")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set := func(v int) state.Entry {
		t.Helper()
		en, err := owner.State("ns").Set(ctx, "k", v)
		if err != nil {
			t.Fatal(err)
		}
		return en
	}
	next := func(w *StateWatch) state.Entry {
		t.Helper()
		select {
		case en := <-w.Changes():
			return en
		case <-time.After(5 * time.Second):
			t.Fatal("no change")
		}
		panic("unreachable")
	}
	set(1)
	w, err := watcher.State("ns").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	set(2)
	if en := next(w); string(en.Value) != "2" {
		t.Fatalf("change %+v", en)
	}
	live := func(on bool) {
		watcher.mu.Lock()
		w.live = on
		watcher.mu.Unlock()
	}
	live(false)
	set(3)
	set(4)
	if _, err := watcher.Whois(ctx, ""); err != nil { // the reader has now read past both deltas
		t.Fatal(err)
	}
	live(true)
	want := set(5) // seq 5 after seq 2: a gap
	if en := next(w); en.Version != want.Version || string(en.Value) != "5" {
		t.Fatalf("after the resync: %+v, want %+v", en, want)
	}
	// The next change is the next write: the resync repeats nothing.
	if got, en := set(6), next(w); string(en.Value) != "6" || got.Version <= want.Version {
		t.Fatalf("change after the resync = %+v, want the write of 6 (a duplicate?)", en)
	}
	if w.replica.Seq() != 6 {
		t.Fatalf("replica at seq %d", w.replica.Seq())
	}
}
