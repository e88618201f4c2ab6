package durable

import (
	"context"
	"testing"
	"time"

	"busbar/relay"
	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// tokenIDs returns the ids of the invitations d has recorded, checking
// that the sweep's index lists the same ones.
func tokenIDs(t *testing.T, d *Device) map[seal.TokenID]bool {
	t.Helper()
	ids := map[seal.TokenID]bool{}
	err := d.view(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bTokens).ForEach(func(k, _ []byte) error {
			ids[seal.TokenID(k)] = true
			return nil
		}); err != nil {
			return err
		}
		if n := countKeys(tx.Bucket(bTokenExp)); n != len(ids) {
			t.Errorf("%d token records, %d in the index", len(ids), n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestTokenRetentionIsTheRelaysLongestTTL(t *testing.T) {
	if TokenRetention != relay.MaxTTL {
		t.Fatalf("TokenRetention %v, relay.MaxTTL %v", TokenRetention, relay.MaxTTL)
	}
}

// Token records, used or not, stay until TokenRetention past their
// expiry, and not a millisecond longer: until then a copy of the accepted
// Pair is acked with no event; after, it is an unknown token, and changes
// nothing either.
func TestTokenRecordsGoAfterTheirRetention(t *testing.T) {
	r := newRelay(t, relayOpts())
	ca := newClock()
	a, b := newDevice(t, testOpts(ca)), newDevice(t, testOpts(nil))
	if _, err := a.CreateGroup("home", "a"); err != nil {
		t.Fatal(err)
	}
	used := invite(t, a) // valid for an hour
	unused, err := a.Invite("home", seal.MinInviteTTL)
	if err != nil {
		t.Fatal(err)
	}
	join(t, b, used, "b")
	copies := copyPushesTo(r, a)
	settle(t, r, []*Device{a, b}, []*collector{{}, {}})
	r.after = nil
	sameManifest(t, 2, 2, a, b)
	pairs := copies()
	if len(pairs) != 1 {
		t.Fatalf("%d pushes to a", len(pairs))
	}
	replay := func() []Event {
		t.Helper()
		if _, err := r.st.Push(context.Background(), a.ID().String(), pairs[0]); err != nil {
			t.Fatal(err)
		}
		mustDrain(t, a, r, &collector{})
		sameManifest(t, 2, 2, a, b)
		return takeEvents(t, a)
	}
	want := func(ids ...seal.TokenID) {
		t.Helper()
		got := tokenIDs(t, a)
		if len(got) != len(ids) {
			t.Fatalf("%d token records, want %d", len(got), len(ids))
		}
		for _, id := range ids {
			if !got[id] {
				t.Fatalf("token %v gone", id)
			}
		}
	}
	want(used.ID(), unused.ID())

	until := func(tok *seal.Token) time.Duration { return tok.Expires().Add(TokenRetention).Sub(ca.Now()) }
	ca.Add(until(unused) - time.Millisecond)
	if evs := replay(); len(evs) != 0 {
		t.Fatalf("events %+v", evs)
	}
	want(used.ID(), unused.ID())
	ca.Add(time.Millisecond)
	if evs := replay(); len(evs) != 0 {
		t.Fatalf("events %+v", evs)
	}
	want(used.ID())

	ca.Add(until(used) - time.Millisecond)
	if evs := replay(); len(evs) != 0 {
		t.Fatalf("a copy of the accepted Pair within the retention: events %+v", evs)
	}
	want(used.ID())
	ca.Add(time.Millisecond)
	if evs := replay(); len(evs) != 1 || evs[0].Reason != ReasonUnknownToken {
		t.Fatalf("past the retention: events %+v", evs)
	}
	want()
}

// A device that receives but never invites again still deletes old
// records: each message handled sweeps them. A device.db made before the
// sweep's index existed is indexed when it is opened.
func TestTokenRecordsSweptWhileReceiving(t *testing.T) {
	ca := newClock()
	r, a, b := pair(t, ca, nil)
	tok, err := a.Invite("home", seal.MinInviteTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bTokenExp) }); err != nil {
		t.Fatal(err)
	}
	a = reopen(t, a, testOpts(ca))
	if ids := tokenIDs(t, a); !ids[tok.ID()] {
		t.Fatal("the record is gone")
	}
	ca.Add(tok.Expires().Add(TokenRetention).Sub(ca.Now()))
	send(t, b, "m")
	flush(t, b, r)
	var got collector
	mustDrain(t, a, r, &got)
	if len(got.msgs) != 1 {
		t.Fatalf("handled %q", got.bodies())
	}
	if ids := tokenIDs(t, a); len(ids) != 0 {
		t.Fatalf("%d token records left", len(ids))
	}
}
