package client_test

// Watches that fall behind: a reader that stops reading while changes pile
// up must still get every key's latest value (state) or every change
// (services), or see the watch end; it never silently goes stale.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/state"
	"busbar/wire"
)

// watchBound is how long these tests wait for a watch to deliver or end
// before calling it frozen: far past what a correct watch takes on a busy
// machine, since a frozen one never moves.
const watchBound = 30 * time.Second

// burstWhilePaused starts a watch of ns on a watcher whose reads can be
// paused, pauses it while owner writes n values of size bytes (more than
// the socket and the broker's queue hold, so deltas are dropped), resumes
// it, and waits until the watcher has read everything queued for it.
func burstWhilePaused(t *testing.T, e *testbroker.Env, owner *client.Client, ns string, n, size int) (*client.Client, *client.StateWatch) {
	t.Helper()
	watcher, pc := connectPausable(t, e, "watcher")
	ctx := ctxT(t, 10*time.Second)
	w, err := watcher.State(ns).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if _, err := owner.State(ns).Set(ctx, "seed", 1); err != nil {
		t.Fatal(err)
	}
	if en := nextChange(t, w); en.Key != "seed" {
		t.Fatalf("change %+v", en)
	}
	pc.Pause()
	value := strings.Repeat("x", size)
	for i := range n {
		if _, err := owner.State(ns).Set(ctx, fmt.Sprint("k", i), value); err != nil {
			t.Fatal(err)
		}
	}
	pc.Resume()
	// A round trip answered after every delta queued so far (retried: the
	// answer itself may not fit the watcher's queue yet).
	testbroker.Eventually(t, watchBound, "the watcher to catch up", func() bool {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := watcher.Whois(c, "")
		return err == nil
	})
	return watcher, w
}

// TestWatchCloseDoesNotRaceSetup: Close, run after a Watch or
// WatchServices has returned but not synchronised with it, does not race
// with the watch's setup; run with -race. One broker: the race is the
// client's.
// (Watch used to assign its stop function after the answer came in, while
// end, run by Close, read it unsynchronised.)
func TestWatchCloseDoesNotRaceSetup(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	for _, kind := range []string{"state", "services"} {
		t.Run(kind, func(t *testing.T) {
			c, err := dialClient(e, "racer-"+kind)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				// Not cancelled: the context's AfterFunc must not run end first.
				ctx := context.Background()
				var err error
				if kind == "state" {
					_, err = c.State("ns").Watch(ctx)
				} else {
					_, err = c.WatchServices(ctx)
				}
				done <- err
			}()
			// Not a synchronisation, on purpose: Close must run after
			// Watch has returned as far as the clock goes, but with no
			// happens-before edge to it, or the race detector has nothing
			// to check. Any wait on the watching goroutine (a channel, a
			// poll, synctest.Wait) would order the two.
			time.Sleep(300 * time.Millisecond)
			c.Close()
			if err := <-done; err != nil {
				t.Logf("watch: %v", err)
			}
		})
	}
}

// TestStateWatchRefusedResyncDoesNotFreeze: deltas are dropped for a
// watcher while the namespace grows past MaxPayload, so the snapshot its
// replica asks for at the next delta is refused (too large); the watch
// must then deliver later changes or end, never freeze.
// (The refusal left the replica resyncing forever, skipping every later
// delta as part of the gap: the watch neither delivered nor ended.)
// One broker, as the next two: each checks what the watcher's own broker
// does when the watcher's queue is full, with queues so small that a
// bus's links between brokers, which share the limits, could not run; a
// write merged from another broker takes the same path to the watcher
// (stateService.notifyLocked).
func TestStateWatchRefusedResyncDoesNotFreeze(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 150_000, MaxQueueBytes: 300_000, MaxQueueMessages: 2})
	owner := connect(t, e, "owner")
	_, w := burstWhilePaused(t, e, owner, "big", 12, 50_000)
	ctx := ctxT(t, 10*time.Second)
	if _, err := owner.State("big").Set(ctx, "after", "done"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(watchBound)
	for {
		select {
		case en, ok := <-w.Changes():
			if !ok {
				t.Logf("watch ended: %v", w.Err())
				return // ending with an error is an acceptable outcome
			}
			if en.Key == "after" {
				return
			}
		case <-deadline:
			t.Fatalf("the watch is frozen: no change for \"after\" and not ended (err %v)", w.Err())
		}
	}
}

// TestStateWatchRecoversDroppedTail: deltas dropped at the end of a burst
// are recovered although no later delta comes (docs/state.md: "the
// application still sees every key's latest value once").
// (A gap was noticed only at the next delta, so a namespace that went
// quiet left the watcher without the latest values indefinitely.)
func TestStateWatchRecoversDroppedTail(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxQueueMessages: 2})
	owner := connect(t, e, "owner")
	_, w := burstWhilePaused(t, e, owner, "tail", 12, 50_000)
	ctx := ctxT(t, 10*time.Second)
	final, err := owner.State("tail").Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica := state.FromSnapshot(w.Initial())
	seed, _, err := owner.State("tail").Get(ctx, "seed") // burstWhilePaused consumed its change
	if err != nil {
		t.Fatal(err)
	}
	replica.Commit(seed)
	deadline := time.After(watchBound)
	for !reflect.DeepEqual(replica.Snapshot().Entries, final.Entries) {
		select {
		case en, ok := <-w.Changes():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			replica.Commit(en)
		case <-deadline:
			t.Fatalf("the replica holds %d of %d entries and will not learn the rest until another write",
				replica.Len(), len(final.Entries))
		}
	}
}

// TestServiceWatchReportsLostEvents: when the broker drops registry
// events for a watcher whose queue is full, the ServiceWatch ends (with
// ErrWatchOverflow) rather than stay live with a stale registry: its
// contract is every change, once, in order.
// (The broker only logged the drop and the client did not check the
// events' numbers: the watch silently missed changes.)
func TestServiceWatchReportsLostEvents(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxQueueMessages: 2})
	ctx := ctxT(t, 10*time.Second)
	watcher, pc := connectPausable(t, e, "watcher")
	w, err := watcher.WatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	alpha := connect(t, e, "alpha")
	meta := json.RawMessage(`{"pad":"` + strings.Repeat("m", wire.MaxMetaBytes-20) + `"}`)
	pc.Pause()
	const n = 200
	for i := range n {
		if _, err := alpha.Announce(ctx, wire.Announcement{Service: "svc", Version: fmt.Sprint("v", i), Meta: meta}); err != nil {
			t.Fatal(err)
		}
	}
	pc.Resume()
	got, last := 0, ""
	quiet := time.After(watchBound)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Logf("watch ended after %d events: %v", got, w.Err())
				return // ending is an acceptable way to report the loss
			}
			got++
			last = ev.Service.Version
			if got == n {
				return
			}
		case <-quiet:
			t.Fatalf("the watch is live but got %d of %d events; the last version it knows is %q, the registry's is %q",
				got, n, last, fmt.Sprint("v", n-1))
		}
	}
}
