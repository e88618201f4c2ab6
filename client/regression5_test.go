package client_test

// Regression tests from the review of issue 5 (discovery and state): each
// test's comment describes the defect it caught; all are fixed.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/state"
	"busbar/transport"
	"busbar/wire"
)

// pausableConn stops handing bytes to the client's reader while paused, as
// a peer that stopped reading would: the broker's socket fills up.
type pausableConn struct {
	net.Conn
	mu     sync.Mutex
	paused bool
	resume chan struct{}
}

func (p *pausableConn) Pause() {
	p.mu.Lock()
	if !p.paused {
		p.paused, p.resume = true, make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *pausableConn) Resume() {
	p.mu.Lock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
	p.mu.Unlock()
}

func (p *pausableConn) Read(b []byte) (int, error) {
	p.mu.Lock()
	paused, ch := p.paused, p.resume
	p.mu.Unlock()
	if paused {
		<-ch
	}
	return p.Conn.Read(b)
}

func (p *pausableConn) Close() error {
	p.Resume()
	return p.Conn.Close()
}

// connectPausable connects node over e's (non-inproc) transport through a
// pausableConn.
func connectPausable(t *testing.T, e *testbroker.Env, node string) (*client.Client, *pausableConn) {
	t.Helper()
	var pc *pausableConn
	c := connect(t, e, node, func(o *client.Options) {
		o.Dial = func(ctx context.Context) (net.Conn, error) {
			ep, err := transport.ParseEndpoint(e.Endpoint)
			if err != nil {
				return nil, err
			}
			nc, err := transport.Dial(ctx, ep, e.ClientTLS)
			if err != nil {
				return nil, err
			}
			pc = &pausableConn{Conn: nc}
			return pc, nil
		}
	})
	t.Cleanup(pc.Resume)
	return c, pc
}

// rawSet writes a delta as a hand-driven node and returns the answer.
func rawSet(t *testing.T, r *testbroker.Raw, id string, d state.Delta) *wire.Message {
	t.Helper()
	body, _ := json.Marshal(d)
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, id).WithBody(body))
	return r.Read(t)
}

// TestReview5ClockPoisonedAcrossNamespaces: a node allowed to write one
// open key writes it at state.MaxVersion. The client's Lamport clock is
// one for every namespace, so once the owner merely reads that key, every
// later Set of the owner — in any namespace — computes MaxVersion+1 and is
// refused by its own Check.
func TestReview5ClockPoisonedAcrossNamespaces(t *testing.T) {
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

// TestReview5WatchStopRace: Watch and WatchServices assign w.stop after
// the answer is in, while end (run by Close, by the context's AfterFunc or
// by the reader on overflow) reads it: with no synchronisation between the
// two, the race detector reports it.
func TestReview5WatchStopRace(t *testing.T) {
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
			// No synchronisation with the watching goroutine: Close runs
			// after Watch has returned, as far as the clock goes, but not
			// in the happens-before order.
			time.Sleep(300 * time.Millisecond)
			c.Close()
			if err := <-done; err != nil {
				t.Logf("watch: %v", err)
			}
		})
	}
}

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
	testbroker.Eventually(t, 5*time.Second, "the watcher to catch up", func() bool {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := watcher.Whois(c, "")
		return err == nil
	})
	return watcher, w
}

// TestReview5ResyncFailureFreezesWatch: deltas are dropped for a watcher
// while the namespace grows past MaxPayload. At the next delta the replica
// notices the gap and asks for a snapshot, which the broker refuses (too
// large). install ignores the refusal and leaves resync set, and nothing
// retries or times out the request, so every later delta is skipped as part
// of the gap: the watch neither delivers nor ends.
func TestReview5ResyncFailureFreezesWatch(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 150_000, MaxQueueBytes: 300_000, MaxQueueMessages: 2})
	owner := connect(t, e, "owner")
	_, w := burstWhilePaused(t, e, owner, "big", 12, 50_000)
	ctx := ctxT(t, 10*time.Second)
	if _, err := owner.State("big").Set(ctx, "after", "done"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(3 * time.Second)
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

// TestReview5DroppedTailNeverResyncs: deltas dropped at the end of a burst
// are never noticed: the replica detects a gap only when a later delta
// arrives, so a namespace that goes quiet leaves the watcher without the
// latest values indefinitely (docs/state.md: "the application still sees
// every key's latest value once").
func TestReview5DroppedTailNeverResyncs(t *testing.T) {
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
	deadline := time.After(3 * time.Second)
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

// TestReview5ReplacedConnectionKeepsItsServices: alpha's old connection
// stops reading (its socket is full), alpha reconnects without hosting
// "svc" any more and beta announces "svc". The old connection's record
// stays in the registry until its writer gives up (WriteTimeout), so the
// bare name "svc" is AMBIGUOUS and Whois still lists the replaced
// connection, although the docs say its services go when it is replaced.
func TestReview5ReplacedConnectionKeepsItsServices(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{WriteTimeout: 5 * time.Second})
	ctx := ctxT(t, 10*time.Second)
	owner := connect(t, e, "owner")
	old, pc := connectPausable(t, e, "alpha")
	if _, err := old.Announce(ctx, wire.Announcement{Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	w, err := old.State("fill").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pc.Pause()
	value := strings.Repeat("x", 60_000)
	for i := range 40 { // far more than the socket buffers hold
		if _, err := owner.State("fill").Set(ctx, fmt.Sprint("k", i), value); err != nil {
			t.Fatal(err)
		}
	}
	oldEpoch := old.Epoch()
	connect(t, e, "alpha") // replaces the old connection
	beta := connect(t, e, "beta")
	if _, err := beta.Scope("s").Channel("svc.ping").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
		return []byte("beta"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := beta.Announce(ctx, wire.Announcement{Service: "svc", Channels: []string{"svc.ping"}}); err != nil {
		t.Fatal(err)
	}
	// The old connection may take a moment to leave; not its WriteTimeout.
	start := time.Now()
	var last string
	for time.Since(start) < 1500*time.Millisecond {
		m, err := owner.Scope("c").Channel("svc.ping").Request(ctx, "svc", nil)
		list, _ := owner.Whois(ctx, "svc")
		var stale []string
		for _, in := range list {
			if in.Provenance.Node == "alpha" && in.Provenance.Epoch == oldEpoch {
				stale = append(stale, in.Address)
			}
		}
		if err == nil && string(m.Payload()) == "beta" && len(stale) == 0 {
			return
		}
		last = fmt.Sprintf("request to svc: %v; records of the replaced connection: %v", err, stale)
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%v after alpha was replaced: %s", time.Since(start).Round(time.Millisecond), last)
}

// TestReview5RawValueEscaped: a json.RawMessage value is checked against
// MaxValueBytes as given, but json.Marshal of the delta HTML-escapes it
// ('<' becomes \u003c), so the broker stores other bytes than were written
// and refuses a value that the client's own check passed.
func TestReview5RawValueEscaped(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	c := connect(t, e, "alpha")
	ctx := ctxT(t, 5*time.Second)
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
}

// TestReview5ServiceWatchSilentlyLosesEvents: the broker drops bus.service
// events for a watcher whose queue is full (registry.notifyLocked only logs
// it), and the client neither checks the events' numbers nor ends the
// watch, so the ServiceWatch stays live with a stale registry, against its
// contract ("every change after it, once, in order (no gap, no
// duplicate)"; an overflow is supposed to end it with ErrWatchOverflow).
func TestReview5ServiceWatchSilentlyLosesEvents(t *testing.T) {
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
	quiet := time.After(3 * time.Second)
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
