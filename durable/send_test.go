package durable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"busbar/seal"
)

func TestOrderPerSender(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b, c := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b, c)
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprint("message ", i))
		send(t, a, want[i])
	}
	if n, _ := a.Outbox(); n != 40 {
		t.Fatalf("outbox holds %d entries, want 40 (20 messages × 2 recipients)", n)
	}
	if res := flush(t, a, r); res.Pushed != 40 || res.Pending != 0 {
		t.Fatalf("flush: %+v", res)
	}
	for _, d := range []*Device{b, c} {
		var got collector
		mustDrain(t, d, r, &got)
		if !slices.Equal(got.bodies(), want) {
			t.Fatalf("%v got %q", d.ID(), got.bodies())
		}
		for _, m := range got.msgs {
			if m.From.ID() != a.ID() || m.Group != "home" {
				t.Fatalf("message from %v in %q", m.From.ID(), m.Group)
			}
		}
		if inbox(r, d) != 0 {
			t.Fatal("inbox not empty after handling")
		}
	}
}

func TestIdenticalBodiesDistinctIDs(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	id1, id2 := send(t, a, "same"), send(t, a, "same")
	if id1 == id2 {
		t.Fatal("two sends share an id")
	}
	flush(t, a, r)
	var got collector
	mustDrain(t, b, r, &got)
	if len(got.msgs) != 2 || got.msgs[0].ID != id1 || got.msgs[1].ID != id2 {
		t.Fatalf("got %v", got.msgs)
	}
}

func TestPayloadLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		want int
	}{
		{"default", 0, seal.MaxPayloadBytes},
		{"lower", 1000, 1000},
		{"higher is clamped", 1 << 20, seal.MaxPayloadBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOpts(nil)
			o.MaxPayloadBytes = tc.max
			a, b := newDevice(t, o), newDevice(t, testOpts(nil))
			group(t, a, b)
			if _, err := a.Send(context.Background(), "home", make([]byte, tc.want)); err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			_, err := a.Send(context.Background(), "home", make([]byte, tc.want+1))
			var tooLarge ErrPayloadTooLarge
			if !errors.As(err, &tooLarge) || tooLarge.Max != tc.want || tooLarge.Size != tc.want+1 {
				t.Fatalf("past the limit: %v", err)
			}
			if n, _ := a.Outbox(); n != 1 {
				t.Fatalf("outbox holds %d entries, want only the first send", n)
			}
		})
	}
	if seal.MaxPayloadBytes+1 != 61441 {
		t.Fatal("the protocol size limit moved")
	}
}

func TestSendRefusals(t *testing.T) {
	a, b, c := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	m := group(t, a, b)
	var nm *ErrNotMember
	if _, err := c.Send(context.Background(), "home", []byte("x")); !errors.As(err, &nm) || nm.Status != StatusNoGroup || !errors.Is(err, seal.ErrNotMember) {
		t.Fatalf("no group: %v", err)
	}
	// c holds a manifest that does not list it (it was removed).
	m2, err := m.Add(a.Identity(), c.Identity().Public(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallGroup(m2); err != nil {
		t.Fatal(err)
	}
	m3, err := m2.Remove(a.Identity(), c.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateGroup(m3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), "home", []byte("x")); !errors.As(err, &nm) || nm.Status != StatusRemoved {
		t.Fatalf("removed: %v", err)
	}
	a.Close()
	if _, err := a.Send(context.Background(), "home", []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if n, _ := a.Outbox(); n != 0 {
		t.Fatalf("refused sends left %d entries", n)
	}
}

// The outbox stores the message once and seals it anew at each push: two
// pushes of one entry are different bytes that open to the same id and
// sender timestamp.
func TestResealKeepsIDAndTimestamp(t *testing.T) {
	c := newClock()
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(c)), newDevice(t, testOpts(nil))
	group(t, a, b)
	var blobs [][]byte
	r.before = func(blob []byte) error {
		blobs = append(blobs, bytes.Clone(blob))
		return errors.New("network down")
	}
	id := send(t, a, "hello")
	flush(t, a, r)
	c.Add(time.Hour)
	flush(t, a, r)
	if len(blobs) != 2 || bytes.Equal(blobs[0], blobs[1]) {
		t.Fatalf("%d pushes; want 2 different seals", len(blobs))
	}
	m, _ := b.Group("home")
	for _, blob := range blobs {
		in, err := seal.Open(b.Identity(), blob, m)
		if err != nil || in.ID != id || !in.Timestamp.Equal(t0) {
			t.Fatalf("opened %v at %v: %v", in.ID, in.Timestamp, err)
		}
	}
}
