package durable

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// A handler that panics is a handler that throws: it is retried, and
// after HandlerAttempts panics the message is acked and dropped with
// handlerGaveUp carrying the panic's text; the process goes on and the
// next message is handled.
func TestAHandlerPanicIsRetriedThenGivenUp(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	bad := send(t, a, "explodes")
	send(t, a, "fine")
	flush(t, a, r)
	var mu sync.Mutex
	attempts := map[string][]int{}
	got := collector{}
	if _, err := b.OnMessage(func(ctx context.Context, m Message) error {
		mu.Lock()
		attempts[string(m.Body)] = append(attempts[string(m.Body)], m.Attempt)
		mu.Unlock()
		if string(m.Body) == "explodes" {
			panic("boom at " + m.ID.String())
		}
		return got.handle(ctx, m)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Run(context.Background(), r); !errors.Is(err, errDrained) {
		t.Fatalf("Run: %v", err)
	}
	if a := attempts["explodes"]; len(a) != HandlerAttempts || a[0] != 1 || a[HandlerAttempts-1] != HandlerAttempts {
		t.Fatalf("attempts of the panicking message: %v", a)
	}
	if b := got.bodies(); len(b) != 1 || b[0] != "fine" {
		t.Fatalf("handled %q", b)
	}
	evs := takeEvents(t, b)
	if len(evs) != 1 || evs[0].Kind != EventHandlerGaveUp || evs[0].MessageID != bad || !strings.Contains(evs[0].Err, "handler panicked: boom at "+bad.String()) {
		t.Fatalf("events %+v", evs)
	}
	if inbox(r, b) != 0 {
		t.Fatal("the given-up message was not acked")
	}
}

// Events are read without being consumed: Events returns them until
// AckEvents; Serve gives each to OnEvent once, even across Serves of the
// device (the place is kept in device.db), starting with those raised
// while no listener ran.
func TestEventsAreShownOnceAndKeptUntilAcked(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	for _, reason := range []string{"one", "two"} {
		if err := b.update(func(tx *bolt.Tx) error {
			return b.raise(tx, Event{Kind: EventDeliveryIssue, Reason: reason})
		}); err != nil {
			t.Fatal(err)
		}
	}
	shown := make(chan Event, 8)
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Serve(ctx, r, ServeOptions{OnEvent: func(e Event) { shown <- e }}) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	}
	expect := func(reasons ...string) {
		t.Helper()
		for _, want := range reasons {
			select {
			case e := <-shown:
				if e.Reason != want {
					t.Fatalf("shown %q, want %q", e.Reason, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%q not shown", want)
			}
		}
	}
	stop := run()
	expect("one", "two")
	// Raised while it runs, in another process of the device.
	other := reopen(t, b, testOpts(nil))
	if err := other.update(func(tx *bolt.Tx) error {
		return other.raise(tx, Event{Kind: EventDeliveryIssue, Reason: "three"})
	}); err != nil {
		t.Fatal(err)
	}
	expect("three")
	stop()
	stop = run()
	if err := b.update(func(tx *bolt.Tx) error { return b.raise(tx, Event{Kind: EventDeliveryIssue, Reason: "four"}) }); err != nil {
		t.Fatal(err)
	}
	expect("four") // not one, two or three again
	stop()
	evs, dropped, err := b.Events(0)
	if err != nil || dropped != 0 || len(evs) != 4 {
		t.Fatalf("Events: %d events, %d dropped, %v", len(evs), dropped, err)
	}
	if err := b.AckEvents(evs[1].Seq); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := b.Events(0); len(evs) != 2 || evs[0].Reason != "three" {
		t.Fatalf("after AckEvents: %+v", evs)
	}
}

// Past MaxEvents the oldest event goes; it counts as dropped only if no
// listener was shown it.
func TestEventsDroppedCountOnlyThoseNeverShown(t *testing.T) {
	o := testOpts(nil)
	o.MaxEvents = 2
	d := newDevice(t, o)
	raise := func(reason string) {
		t.Helper()
		if err := d.update(func(tx *bolt.Tx) error { return d.raise(tx, Event{Kind: EventDeliveryIssue, Reason: reason}) }); err != nil {
			t.Fatal(err)
		}
	}
	raise("a")
	raise("b")
	evs, _ := d.unshownEvents()
	if err := d.markShown(evs[len(evs)-1].Seq); err != nil {
		t.Fatal(err)
	}
	raise("c") // a goes, shown: not a drop
	if _, dropped, _ := d.Events(0); dropped != 0 {
		t.Fatalf("dropped %d after losing a shown event", dropped)
	}
	raise("d") // b goes, shown
	raise("e") // c goes, never shown
	evs, dropped, err := d.Events(0)
	if err != nil || dropped != 1 || len(evs) != 2 || evs[0].Reason != "d" {
		t.Fatalf("events %+v, dropped %d, %v", evs, dropped, err)
	}
}

// A blob that opens but whose sender is not a member is a delivery issue
// that names the message it is about.
func TestADeliveryIssueNamesTheMessageWhenTheBlobOpens(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b, stranger := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	msg, err := seal.NewMessage(seal.KindSync, "home", []byte("hi"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	blob, err := seal.Seal(stranger.me, b.me.Public(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Push(context.Background(), blob); err != nil {
		t.Fatal(err)
	}
	var got collector
	mustDrain(t, b, r, &got)
	evs := takeEvents(t, b)
	if len(evs) != 1 || evs[0].Kind != EventDeliveryIssue || evs[0].MessageID != msg.ID || evs[0].Peer != stranger.ID().String() {
		t.Fatalf("events %+v, want a deliveryIssue about %s", evs, msg.ID)
	}
}

// A success to a recipient restarts the backoff of its entries behind it:
// an entry behind that had one is due at once.
func TestASuccessResetsTheBackoffBehindIt(t *testing.T) {
	c := newClock()
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(c)), newDevice(t, testOpts(nil))
	group(t, a, b)
	send(t, a, "first")
	send(t, a, "second")
	// Give "second" a backoff of its own, as if it had been a head that failed.
	if err := a.update(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bOutbox).Cursor()
		cur.First()
		k, v := cur.Next()
		e, err := decodeEntry(v)
		if err != nil {
			return err
		}
		e.attempts, e.due = 6, c.Now().Add(time.Hour)
		return tx.Bucket(bOutbox).Put(append([]byte(nil), k...), e.encode())
	}); err != nil {
		t.Fatal(err)
	}
	if res := flush(t, a, r); res.Pushed != 2 || res.Pending != 0 {
		t.Fatalf("flush %+v: the success of first did not free second", res)
	}
}

// device.db held by another process past the lock timeout is a failure
// that passes: Serve reports it as retrying and goes on, and once the
// lock is free it delivers what was sent meanwhile.
func TestServeOutlastsALockedDeviceStore(t *testing.T) {
	r := newRelay(t, relayOpts())
	r.idle = 0 // sessions wait for blobs: Run does not end by draining
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	o := testOpts(nil)
	o.LockTimeout = 20 * time.Millisecond
	impatient := reopen(t, b, o)
	got := make(chan string, 1)
	if _, err := impatient.OnMessage(func(_ context.Context, m Message) error { got <- string(m.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(b.Dir(), DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	retrying := make(chan error, 16)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- impatient.Serve(ctx, r, ServeOptions{OnState: func(s State) {
			if s.Kind == StateRetrying {
				select {
				case retrying <- s.Err:
				default:
				}
			}
		}})
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	select {
	case err := <-retrying:
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("retrying because of %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retrying state while device.db was held")
	}
	db.Close()
	send(t, a, "after the lock")
	flush(t, a, r)
	select {
	case body := <-got:
		if body != "after the lock" {
			t.Fatalf("got %q", body)
		}
	case err := <-served:
		served <- err // for the deferred check
		t.Fatalf("Serve ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("nothing delivered once the lock was free")
	}
}
