package durable

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"busbar/relay"
	"busbar/seal"
)

func TestBackoff(t *testing.T) {
	want := []time.Duration{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for n, w := range want {
		if got := backoff(uint32(n)); got != w*time.Second {
			t.Errorf("backoff(%d) = %v, want %v", n, got, w*time.Second)
		}
	}
	if backoff(1<<31) != MaxBackoff {
		t.Error("no cap on many attempts")
	}
}

// A temporary refusal queues the entry again with the backoff schedule;
// the entries behind it wait (head of line), and all go out in order once
// the relay takes them.
func TestBackoffScheduleAndHeadOfLine(t *testing.T) {
	c := newClock()
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(c)), newDevice(t, testOpts(nil))
	group(t, a, b)
	refuse := true
	r.before = func([]byte) error {
		if refuse {
			return &RefusedError{Code: CodeInboxFull}
		}
		return nil
	}
	send(t, a, "first")
	send(t, a, "second")
	start := c.Now()
	var elapsed time.Duration
	for i, step := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300} {
		pushes := r.pushCount()
		res := flush(t, a, r)
		if r.pushCount() != pushes+1 || res.Retry != 1 {
			t.Fatalf("round %d: %d pushes, %+v; want the head only", i, r.pushCount()-pushes, res)
		}
		if want := c.Now().Add(step * time.Second); !res.NextDue.Equal(want) {
			t.Fatalf("round %d: next due %v after start, want %v", i, res.NextDue.Sub(start), want.Sub(start))
		}
		c.Add(step*time.Second - time.Millisecond)
		pushes = r.pushCount()
		flush(t, a, r)
		if r.pushCount() != pushes {
			t.Fatalf("round %d: pushed before the backoff ran out", i)
		}
		c.Add(time.Millisecond)
		elapsed += step * time.Second
	}
	if c.Now().Sub(start) != elapsed {
		t.Fatal("clock drift in the test")
	}
	// A reconnect makes it due at once.
	flush(t, a, r)
	refuse = false
	if err := a.RetryNow(); err != nil {
		t.Fatal(err)
	}
	if res := flush(t, a, r); res.Pushed != 2 || res.Pending != 0 {
		t.Fatalf("after reconnect: %+v", res)
	}
	var got collector
	mustDrain(t, b, r, &got)
	if !slices.Equal(got.bodies(), []string{"first", "second"}) {
		t.Fatalf("got %q", got.bodies())
	}
}

// Head of line is per recipient: one recipient's refusals do not hold up
// another's entries.
func TestHeadOfLineIsPerRecipient(t *testing.T) {
	c := newClock()
	r := newRelay(t, relayOpts())
	a, b, d := newDevice(t, testOpts(c)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b, d)
	r.before = func(blob []byte) error {
		if to, _ := seal.PeekRecipient(blob); to == b.ID() {
			return errors.New("connection reset")
		}
		return nil
	}
	send(t, a, "1")
	send(t, a, "2")
	res := flush(t, a, r)
	if res.Pushed != 2 || res.Retry != 1 || res.Pending != 2 || inbox(r, d) != 2 || inbox(r, b) != 0 {
		t.Fatalf("%+v; inboxes b %d, d %d", res, inbox(r, b), inbox(r, d))
	}
}

// A permanent refusal by the real store (a blob over its MaxBlobBytes)
// fails the entry with sendFailed(tooLarge); the entry behind it goes out.
func TestPermanentRefusal(t *testing.T) {
	r := newRelay(t, relay.Options{MaxBlobBytes: 4000})
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	big := send(t, a, string(make([]byte, 5000)))
	send(t, a, "small")
	if res := flush(t, a, r); res.Failed != 1 || res.Pushed != 1 || res.Pending != 0 {
		t.Fatalf("%+v", res)
	}
	evs := takeEvents(t, a)
	if len(evs) != 1 || evs[0].Kind != EventSendFailed || evs[0].Reason != ReasonTooLarge || evs[0].MessageID != big || evs[0].Peer != b.ID().String() {
		t.Fatalf("events %+v", evs)
	}
	// MALFORMED is permanent too.
	r.before = func([]byte) error { return &RefusedError{Code: CodeMalformed} }
	send(t, a, "x")
	flush(t, a, r)
	if evs := takeEvents(t, a); len(evs) != 1 || evs[0].Reason != ReasonMalformed {
		t.Fatalf("events %+v", evs)
	}
	var got collector
	mustDrain(t, b, r, &got)
	if !slices.Equal(got.bodies(), []string{"small"}) {
		t.Fatalf("got %q", got.bodies())
	}
}

func TestPermanentCodes(t *testing.T) {
	for code, want := range map[string]bool{
		CodeTooLarge: true, CodeMalformed: true, CodeInboxFull: false, CodeRateLimited: false,
		CodeUnavailable: false, CodeInternal: false,
	} {
		err := errors.Join(errors.New("wrapped"), &RefusedError{Code: code})
		if Permanent(err) != want {
			t.Errorf("Permanent(%s) = %v", code, !want)
		}
	}
	if Permanent(context.DeadlineExceeded) {
		t.Error("a timeout is permanent")
	}
}

// A Sync entry undelivered 30 days after Send is removed with
// sendFailed(expired), at exactly 30 days and not before; a control entry
// stays.
func TestExpiry(t *testing.T) {
	c := newClock()
	r := newRelay(t, relayOpts())
	a, b, d := newDevice(t, testOpts(c)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	m := group(t, a, b)
	r.before = func([]byte) error { return &RefusedError{Code: CodeUnavailable} }
	sync := send(t, a, "sync")
	next, err := m.Add(a.Identity(), d.Identity().Public(), "d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ChangeGroup(context.Background(), seal.KindGroupManifest, next); err != nil {
		t.Fatal(err)
	}
	flush(t, a, r)
	c.Add(SyncTTL - time.Millisecond)
	if res := flush(t, a, r); res.Failed != 0 || res.Pending != 3 {
		t.Fatalf("a millisecond before 30 days: %+v", res)
	}
	c.Add(time.Millisecond)
	if res := flush(t, a, r); res.Failed != 1 || res.Pending != 2 {
		t.Fatalf("at 30 days: %+v", res)
	}
	evs := takeEvents(t, a)
	if len(evs) != 1 || evs[0].Reason != ReasonExpired || evs[0].MessageID != sync {
		t.Fatalf("events %+v", evs)
	}
	c.Add(365 * 24 * time.Hour)
	if res := flush(t, a, r); res.Failed != 0 || res.Pending != 2 {
		t.Fatalf("a year on, control entries: %+v", res)
	}
	// They still go out, and b applies the new manifest.
	r.before = nil
	if err := a.RetryNow(); err != nil {
		t.Fatal(err)
	}
	if res := flush(t, a, r); res.Pushed != 2 {
		t.Fatalf("%+v", res)
	}
	mustDrain(t, b, r, &collector{})
	if got, _ := b.Group("home"); got.Epoch() != next.Epoch() || !got.Has(d.ID()) {
		t.Fatalf("b holds epoch %d", got.Epoch())
	}
}

func TestEventsBound(t *testing.T) {
	o := testOpts(nil)
	o.MaxEvents = 3
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, o), newDevice(t, testOpts(nil))
	group(t, a, b)
	r.before = func([]byte) error { return &RefusedError{Code: CodeMalformed} }
	var ids []seal.MessageID
	for range 5 {
		ids = append(ids, send(t, a, "x"))
	}
	flush(t, a, r)
	evs, dropped, err := a.TakeEvents()
	if err != nil || dropped != 2 || len(evs) != 3 {
		t.Fatalf("%d events, %d dropped: %v", len(evs), dropped, err)
	}
	for i, ev := range evs {
		if ev.MessageID != ids[i+2] {
			t.Fatalf("event %d is for %v, want the newest kept", i, ev.MessageID)
		}
	}
	if evs, dropped, _ := a.TakeEvents(); len(evs) != 0 || dropped != 0 {
		t.Fatal("events taken twice")
	}
}

// batchingRelay is a PipelinedRelay over storeRelay that notes the size
// of each PushAll.
type batchingRelay struct {
	*storeRelay
	sizes []int
}

func (r *batchingRelay) PushAll(ctx context.Context, blobs [][]byte) []PushResult {
	r.sizes = append(r.sizes, len(blobs))
	out := make([]PushResult, len(blobs))
	for i, b := range blobs {
		out[i].Seq, out[i].Err = r.Push(ctx, b)
	}
	return out
}

// Flush hands a pipelining relay FlushWindow entries at a time, and the
// rest after: FlushWindow+1 entries are two pipelines, of FlushWindow and
// of one, delivered in order.
func TestFlushWindow(t *testing.T) {
	r := &batchingRelay{storeRelay: newRelay(t, relay.Options{MaxPushRate: -1})}
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	var want []string
	for i := range FlushWindow + 1 {
		want = append(want, string(rune('A'+i%26))+string(rune('0'+i/26)))
		send(t, a, want[i])
	}
	if res := flush(t, a, r); res.Pushed != FlushWindow+1 || res.Pending != 0 {
		t.Fatalf("%+v", res)
	}
	if !slices.Equal(r.sizes, []int{FlushWindow, 1}) {
		t.Fatalf("pipelines of %v, want [%d 1]", r.sizes, FlushWindow)
	}
	var got collector
	mustDrain(t, b, r.storeRelay, &got)
	if !slices.Equal(got.bodies(), want) {
		t.Fatalf("got %q", got.bodies())
	}
}
