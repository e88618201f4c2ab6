package relay

import (
	"testing"
	"time"
)

func TestExpiredBlobsAreNeverDelivered(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	s := open(t, dir, Options{Now: clk.Now, TTL: time.Hour})
	a := push(t, s, "d", []byte("old"))
	clk.Add(10 * time.Minute)
	b := push(t, s, "d", []byte("newer"))
	ss := session(t, s, "d")

	clk.Add(50*time.Minute - time.Nanosecond) // a is one nanosecond short of its TTL
	checkInbox(t, s, "d", []want{{a, []byte("old")}, {b, []byte("newer")}})
	clk.Add(time.Nanosecond) // a expires
	if got := next(t, ss); got.Seq != b {
		t.Fatalf("delivered seq %d, want %d: the expired blob is skipped", got.Seq, b)
	}
	if st := s.Stats(); st.Expired != 1 || st.Blobs != 1 {
		t.Fatalf("stats %+v", st)
	}

	clk.Add(10 * time.Minute) // b expires too; only the sweep sees it
	s.sweep()
	if st := s.Stats(); st.Expired != 2 || st.Blobs != 0 || st.Inboxes != 0 {
		t.Fatalf("stats after the sweep %+v", st)
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// The deletions are in the log: with the clock turned back, they stay
	// deleted.
	clk.Add(-2 * time.Hour)
	s = open(t, dir, Options{Now: clk.Now, TTL: time.Hour})
	checkInbox(t, s, "d", nil)
}

func TestExpiredWhileClosed(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	s := open(t, dir, Options{Now: clk.Now})
	push(t, s, "d", []byte("expires"))
	clk.Add(24 * time.Hour)
	b := push(t, s, "d", []byte("stays"))
	s.Close()

	clk.Add(DefaultTTL - 24*time.Hour) // the first one's TTL, to the nanosecond
	s = open(t, dir, Options{Now: clk.Now})
	checkInbox(t, s, "d", []want{{b, []byte("stays")}})
	if st := s.Stats(); st.Blobs != 1 || st.LiveBytes != pushRecordSize(1, len("stays")) {
		t.Fatalf("stats %+v", st)
	}
}

func TestSweeperRunsOnItsOwn(t *testing.T) {
	clk := newClock()
	s := open(t, "", Options{Now: clk.Now, TTL: time.Minute, SweepInterval: time.Millisecond})
	push(t, s, "d", []byte("x"))
	clk.Add(time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Expired == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not delete the expired blob")
		}
		time.Sleep(time.Millisecond)
	}
	if in := s.Inbox("d"); in.Blobs != 0 {
		t.Fatalf("inbox %+v", in)
	}
}

// The sweep forgets an inbox once it is empty, nobody waits on it, and its
// rate bucket is full again, so forgetting it grants no extra pushes.
func TestSweepForgetsIdleInboxes(t *testing.T) {
	clk := newClock()
	s := open(t, "", Options{Now: clk.Now, MaxPushRate: 1, PushBurst: 1})
	a := push(t, s, "d", []byte("x"))
	if err := s.Ack("d", a); err != nil {
		t.Fatal(err)
	}
	s.sweep()
	if s.known("d") == false {
		t.Fatal("forgot an inbox whose bucket is empty")
	}
	refused(t, s, "d", []byte("x"), ErrRateLimited)
	clk.Add(time.Second)
	s.sweep()
	if s.known("d") {
		t.Fatal("kept an idle inbox")
	}
	push(t, s, "d", []byte("x"))
}

func (s *Store) known(device string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inboxes[device] != nil
}
