package durable

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"busbar/relay"
	"busbar/seal"
)

var errCrash = errors.New("test: simulated crash")

// crashAt returns a failpoint that crashes once, at the named point.
func crashAt(name string) func(string) error {
	var done atomic.Bool
	return func(at string) error {
		if at == name && done.CompareAndSwap(false, true) {
			return errCrash
		}
		return nil
	}
}

func pair(t *testing.T, ca, cb *clock) (*storeRelay, *Device, *Device) {
	t.Helper()
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(ca)), newDevice(t, testOpts(cb))
	group(t, a, b)
	return r, a, b
}

// Recipient, before the dedup write commits: the blob comes again on the
// next session and the handler runs again.
func TestCrashRecipientBeforeDedup(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	id := send(t, a, "once")
	flush(t, a, r)
	o := testOpts(nil)
	o.failpoint = crashAt("recipient-before-dedup")
	crashing := reopen(t, b, o)
	var first collector
	if err := drain(t, crashing, r, &first); !errors.Is(err, errCrash) {
		t.Fatalf("Run: %v", err)
	}
	var second collector
	mustDrain(t, reopen(t, b, testOpts(nil)), r, &second)
	if len(first.msgs) != 1 || len(second.msgs) != 1 || second.msgs[0].ID != id {
		t.Fatalf("handled %d then %d times", len(first.msgs), len(second.msgs))
	}
	if inbox(r, b) != 0 {
		t.Fatal("not acked")
	}
}

// Recipient, between the dedup write and the ack: the blob comes again, is
// recognised as a duplicate and acked, with no handler call and no event.
func TestCrashRecipientBeforeAck(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	send(t, a, "once")
	flush(t, a, r)
	o := testOpts(nil)
	o.failpoint = crashAt("recipient-before-ack")
	var first collector
	if err := drain(t, reopen(t, b, o), r, &first); !errors.Is(err, errCrash) {
		t.Fatalf("Run: %v", err)
	}
	if inbox(r, b) != 1 {
		t.Fatal("acked despite the crash")
	}
	var second collector
	mustDrain(t, b, r, &second)
	if len(first.msgs) != 1 || len(second.msgs) != 0 || inbox(r, b) != 0 {
		t.Fatalf("handled %d then %d times; inbox %d", len(first.msgs), len(second.msgs), inbox(r, b))
	}
	if evs := takeEvents(t, b); len(evs) != 0 {
		t.Fatalf("events %+v", evs)
	}
}

// Sender, before and after the outbox write.
func TestCrashSenderOutbox(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	o := testOpts(nil)
	o.failpoint = crashAt("sender-before-outbox")
	if _, err := reopen(t, a, o).Send(context.Background(), "home", []byte("lost")); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	o.failpoint = crashAt("sender-after-outbox")
	if _, err := reopen(t, a, o).Send(context.Background(), "home", []byte("kept")); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	flush(t, reopen(t, a, testOpts(nil)), r) // the next start
	var got collector
	mustDrain(t, b, r, &got)
	if !slices.Equal(got.bodies(), []string{"kept"}) {
		t.Fatalf("got %q", got.bodies())
	}
}

// Sender, after the relay persisted the blob and before the push ack: the
// push is made again, and the recipient's dedup drops the copy.
func TestCrashSenderAfterPush(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	send(t, a, "m")
	o := testOpts(nil)
	o.failpoint = crashAt("sender-after-push")
	if _, err := reopen(t, a, o).Flush(context.Background(), r); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	// And a lost push ack on the wire does the same.
	r.after = func([]byte) error { return errors.New("connection reset before the ack") }
	flush(t, a, r)
	r.after = nil
	if err := a.RetryNow(); err != nil {
		t.Fatal(err)
	}
	flush(t, a, r)
	if n := inbox(r, b); n != 3 {
		t.Fatalf("relay holds %d copies, want 3", n)
	}
	var got collector
	mustDrain(t, b, r, &got)
	if len(got.msgs) != 1 || inbox(r, b) != 0 {
		t.Fatalf("handled %d times, inbox %d", len(got.msgs), inbox(r, b))
	}
}

// The dedup record is kept until 60 days after the later of handling and
// the sender timestamp; past the replay window a copy is unreadable.
func TestDedupHorizon(t *testing.T) {
	ca, cb := newClock(), newClock()
	r, a, b := pair(t, ca, cb)
	var blobs [][]byte
	r.after = func(blob []byte) error { blobs = append(blobs, blob); return nil }
	id := send(t, a, "m")
	flush(t, a, r)
	cb.Add(10 * 24 * time.Hour)
	mustDrain(t, b, r, &collector{})
	until, ok, err := b.Dedup(a.ID(), id)
	if want := t0.Add(10*24*time.Hour + ReplayWindow); err != nil || !ok || !until.Equal(want) {
		t.Fatalf("dedup until %v (%v), want %v", until, ok, want)
	}
	replay := func() {
		if _, err := r.st.Push(context.Background(), b.ID().String(), blobs[0]); err != nil {
			t.Fatal(err)
		}
	}
	// At the edge of the replay window (60 days after the sender
	// timestamp): still a duplicate, acked with no event.
	cb.Add(50 * 24 * time.Hour)
	replay()
	var got collector
	mustDrain(t, b, r, &got)
	if len(got.msgs) != 0 || len(takeEvents(t, b)) != 0 || inbox(r, b) != 0 {
		t.Fatal("a duplicate was handled or reported")
	}
	// Past it: unreadable(expired), though the record is still kept.
	cb.Add(time.Millisecond)
	replay()
	mustDrain(t, b, r, &got)
	evs := takeEvents(t, b)
	if len(got.msgs) != 0 || len(evs) != 1 || evs[0].Kind != EventUnreadable || evs[0].Reason != ReasonExpired || evs[0].MessageID != id {
		t.Fatalf("handled %d, events %+v", len(got.msgs), evs)
	}
	if _, ok, _ := b.Dedup(a.ID(), id); !ok {
		t.Fatal("record gone before its time")
	}
	// The record goes with the first dedup write after its time.
	cb.Add(10*24*time.Hour - time.Millisecond)
	ca.Add(70 * 24 * time.Hour)
	send(t, a, "later")
	flush(t, a, r)
	mustDrain(t, b, r, &got)
	if _, ok, _ := b.Dedup(a.ID(), id); !ok {
		t.Fatal("record gone at its time; it is kept until then, inclusive")
	}
	cb.Add(time.Millisecond)
	send(t, a, "later still")
	flush(t, a, r)
	mustDrain(t, b, r, &got)
	if _, ok, _ := b.Dedup(a.ID(), id); ok {
		t.Fatal("record kept past its time")
	}
	if !slices.Equal(got.bodies(), []string{"later", "later still"}) {
		t.Fatalf("got %q", got.bodies())
	}
}

// A sender timestamp in the future is accepted, and the record is kept 60
// days past it.
func TestFutureTimestamp(t *testing.T) {
	ca := newClock()
	ca.Add(5 * 24 * time.Hour)
	r, a, b := pair(t, ca, nil)
	id := send(t, a, "from the future")
	flush(t, a, r)
	var got collector
	mustDrain(t, b, r, &got)
	until, ok, _ := b.Dedup(a.ID(), id)
	if len(got.msgs) != 1 || !ok || !until.Equal(ca.Now().Add(ReplayWindow)) {
		t.Fatalf("handled %d, until %v", len(got.msgs), until)
	}
}

// withVersion rewrites a blob's clear-header version (bytes 4 and 5).
func withVersion(blob []byte, v uint16) []byte {
	b := append([]byte(nil), blob...)
	b[4], b[5] = byte(v>>8), byte(v)
	return b
}

// Newer blobs stay unacked, 100 at most; the 101st is acked and dropped;
// an older version is unreadable(senderOutdated).
func TestHeldForUpgrade(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	m, _ := a.Group("home")
	msg, err := seal.NewMessage(seal.KindSync, "home", []byte("v2"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	blob, err := seal.Seal(a.Identity(), m.Recipients(a.ID())[0], msg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range DefaultMaxHeld + 1 {
		if _, err := r.st.Push(ctx, b.ID().String(), withVersion(blob, seal.Version+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.st.Push(ctx, b.ID().String(), withVersion(blob, seal.Version-1)); err != nil {
		t.Fatal(err)
	}
	send(t, a, "current")
	flush(t, a, r)
	var got collector
	mustDrain(t, b, r, &got)
	if !slices.Equal(got.bodies(), []string{"current"}) {
		t.Fatalf("got %q", got.bodies())
	}
	count := map[string]int{}
	for _, ev := range takeEvents(t, b) {
		count[ev.Kind+"/"+ev.Reason]++
		if ev.Kind == EventHeldForUpgrade && ev.Version != seal.Version+1 {
			t.Fatalf("held version %d", ev.Version)
		}
	}
	want := map[string]int{EventHeldForUpgrade + "/": 100, EventUnreadable + "/" + ReasonTooManyHeld: 1, EventUnreadable + "/" + ReasonSenderOutdated: 1}
	if !mapsEqual(count, want) {
		t.Fatalf("events %v, want %v", count, want)
	}
	if n, _ := b.Held(); n != 100 || inbox(r, b) != 100 {
		t.Fatalf("held %d, inbox %d", n, inbox(r, b))
	}
	// A new session sees them again and raises nothing new.
	mustDrain(t, b, r, &got)
	if evs := takeEvents(t, b); len(evs) != 0 || inbox(r, b) != 100 {
		t.Fatalf("events %d, inbox %d", len(evs), inbox(r, b))
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A revoked member's messages are refused as a delivery issue once the
// recipient holds the manifest without it; the revoked device learns of
// its removal and can no longer send.
func TestRemovedMember(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b, c := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	m := group(t, a, b, c)
	next, err := m.Remove(a.Identity(), c.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ChangeGroup(context.Background(), seal.KindRevoke, next); err != nil {
		t.Fatal(err)
	}
	flush(t, a, r)
	send(t, c, "from c, after its removal") // c has not heard yet
	flush(t, c, r)
	var got collector
	mustDrain(t, b, r, &got)
	if len(got.msgs) != 0 {
		t.Fatalf("b handled %q", got.bodies())
	}
	evs := takeEvents(t, b)
	if len(evs) != 1 || evs[0].Kind != EventDeliveryIssue || evs[0].Reason != "unknownSender" {
		t.Fatalf("events %+v", evs)
	}
	if hb, _ := b.Group("home"); hb.Has(c.ID()) {
		t.Fatal("b still lists c")
	}
	mustDrain(t, c, r, &collector{})
	var nm *ErrNotMember
	if _, err := c.Send(context.Background(), "home", []byte("x")); !errors.As(err, &nm) || nm.Status != StatusRemoved {
		t.Fatalf("c sends after learning of its removal: %v", err)
	}
}

// A control message replayed (pushed twice) is applied once, with no
// event for the copy.
func TestControlReplay(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	d := newDevice(t, testOpts(nil))
	m, _ := a.Group("home")
	next, err := m.Add(a.Identity(), d.Identity().Public(), "d")
	if err != nil {
		t.Fatal(err)
	}
	r.after = func(blob []byte) error {
		to, _ := seal.PeekRecipient(blob)
		_, err := r.st.Push(context.Background(), to.String(), blob)
		return err
	}
	if _, err := a.ChangeGroup(context.Background(), seal.KindGroupManifest, next); err != nil {
		t.Fatal(err)
	}
	flush(t, a, r)
	if inbox(r, b) != 2 {
		t.Fatalf("inbox %d", inbox(r, b))
	}
	mustDrain(t, b, r, &collector{})
	if hb, _ := b.Group("home"); hb.Epoch() != next.Epoch() {
		t.Fatalf("epoch %d", hb.Epoch())
	}
	if evs := takeEvents(t, b); len(evs) != 0 || inbox(r, b) != 0 {
		t.Fatalf("events %+v, inbox %d", evs, inbox(r, b))
	}
}

// A failing handler runs 5 times, then the message is dropped with
// handlerGaveUp; one that fails twice then succeeds is delivered once.
func TestHandlerRetries(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	bad := send(t, a, "bad")
	send(t, a, "flaky")
	flush(t, a, r)
	tries := map[string]int{}
	got := collector{fail: func(m Message) error {
		tries[string(m.Body)]++
		if string(m.Body) == "bad" || tries["flaky"] <= 2 {
			return errors.New("handler failed")
		}
		return nil
	}}
	mustDrain(t, b, r, &got)
	if tries["bad"] != HandlerAttempts || tries["flaky"] != 3 || inbox(r, b) != 0 {
		t.Fatalf("tries %v, inbox %d", tries, inbox(r, b))
	}
	evs := takeEvents(t, b)
	if len(evs) != 1 || evs[0].Kind != EventHandlerGaveUp || evs[0].MessageID != bad || evs[0].Err != "handler failed" || evs[0].Peer != a.ID().String() {
		t.Fatalf("events %+v", evs)
	}
}

func TestOnMessage(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	send(t, a, "m")
	flush(t, a, r)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- b.Run(ctx, r) }()
	time.Sleep(50 * time.Millisecond) // Run must not start a session without a handler
	if r.receives.Load() != 0 || inbox(r, b) != 1 {
		t.Fatal("pulled before a handler was registered")
	}
	handled := make(chan Message, 1)
	cancel, err := b.OnMessage(func(_ context.Context, m Message) error { handled <- m; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.OnMessage(func(context.Context, Message) error { return nil }); !errors.Is(err, ErrHandlerAlreadySet) {
		t.Fatalf("second handler: %v", err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("not handled")
	}
	cancel()
	cancel2, err := b.OnMessage(func(context.Context, Message) error { return nil })
	if err != nil {
		t.Fatalf("after cancel: %v", err)
	}
	cancel2()
	b.Close()
	if err := <-runErr; !errors.Is(err, ErrClosed) && !errors.Is(err, errDrained) {
		t.Fatalf("Run: %v", err)
	}
	if _, err := b.OnMessage(func(context.Context, Message) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// A blob that does not open is acked and reported.
func TestDeliveryIssues(t *testing.T) {
	r, a, b := pair(t, nil, nil)
	outsider := newDevice(t, testOpts(nil))
	msg, _ := seal.NewMessage(seal.KindSync, "home", []byte("x"), time.Now())
	fromOutsider, err := seal.Seal(outsider.Identity(), b.Identity().Public(), msg)
	if err != nil {
		t.Fatal(err)
	}
	toOther, err := seal.Seal(a.Identity(), outsider.Identity().Public(), msg)
	if err != nil {
		t.Fatal(err)
	}
	h := b.ID() // the header names b; the seal is to another key
	copy(toOther[6:26], h[:])
	for _, blob := range [][]byte{fromOutsider, toOther, []byte("junk")} {
		if _, err := r.st.Push(context.Background(), b.ID().String(), blob); err != nil {
			t.Fatal(err)
		}
	}
	mustDrain(t, b, r, &collector{})
	var reasons []string
	for _, ev := range takeEvents(t, b) {
		reasons = append(reasons, ev.Reason)
	}
	if !slices.Equal(reasons, []string{"unknownSender", "badSeal", "malformed"}) || inbox(r, b) != 0 {
		t.Fatalf("reasons %q, inbox %d", reasons, inbox(r, b))
	}
}

// A held record outlives its blob on the relay by at most the relay's
// TTL: past it, it no longer counts against the bound.
func TestStaleHeldForgotten(t *testing.T) {
	cb := newClock()
	o := testOpts(cb)
	o.MaxHeld = 1
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, o)
	group(t, a, b)
	m, _ := a.Group("home")
	msg, _ := seal.NewMessage(seal.KindSync, "home", []byte("v2"), time.Now())
	blob, err := seal.Seal(a.Identity(), m.Recipients(a.ID())[0], msg)
	if err != nil {
		t.Fatal(err)
	}
	push := func() uint64 {
		seq, err := r.st.Push(context.Background(), b.ID().String(), withVersion(blob, seal.Version+1))
		if err != nil {
			t.Fatal(err)
		}
		return uint64(seq)
	}
	first := push()
	mustDrain(t, b, r, &collector{})
	// The relay drops the first blob (its TTL); b does not hear of it.
	if err := r.st.Ack(b.ID().String(), relay.Seq(first)); err != nil {
		t.Fatal(err)
	}
	push()
	cb.Add(SyncTTL)
	mustDrain(t, b, r, &collector{})
	if evs := takeEvents(t, b); len(evs) != 2 || evs[1].Reason != ReasonTooManyHeld {
		t.Fatalf("at the TTL the stale record still counts: %+v", evs)
	}
	push()
	cb.Add(time.Millisecond)
	mustDrain(t, b, r, &collector{})
	if evs := takeEvents(t, b); len(evs) != 1 || evs[0].Kind != EventHeldForUpgrade {
		t.Fatalf("past the TTL: %+v", evs)
	}
}
