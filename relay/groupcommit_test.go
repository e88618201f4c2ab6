package relay

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent pushes share fsyncs, and none returns before the fsync that
// covers it: the sync hook marks each push's seq durable only after the
// real fsync returned, and every Push checks its own seq is marked when it
// returns. Each fsync waits (a slow disk, as slow as it takes) until every
// sender that has pushes left has one admitted, so what piles up meanwhile
// is the next commit whatever the machine's speed: the commits alternate
// between two groups of the senders, and the larger holds at least half.
func TestGroupCommit(t *testing.T) {
	const senders, each = 32, 20
	var mu sync.Mutex
	durable := map[Seq]bool{}
	var fsyncs, biggest, active atomic.Int64
	active.Store(senders)
	var s *Store
	pending := func() (n int64) {
		for d := range 4 {
			n += int64(s.Inbox(fmt.Sprint("dev-", d)).Pending)
		}
		return n
	}
	s = open(t, "", Options{MaxPushRate: -1, hooks: &hooks{sync: func(f *os.File, pushes []Seq) error {
		for len(pushes) > 0 && pending() < active.Load() { // a commit of pushes only: not one of Open's
			runtime.Gosched()
		}
		if err := syncData(f); err != nil {
			return err
		}
		mu.Lock()
		for _, seq := range pushes {
			durable[seq] = true
		}
		mu.Unlock()
		fsyncs.Add(1)
		if n := int64(len(pushes)); n > biggest.Load() {
			biggest.Store(n)
		}
		return nil
	}}})
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer active.Add(-1)
			for i := range each {
				seq, err := s.Push(ctx(t), fmt.Sprint("dev-", g%4), []byte(fmt.Sprint(g, i)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ok := durable[seq]
				mu.Unlock()
				if !ok {
					t.Errorf("push %d returned before the fsync that covers it", seq)
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("%d pushes, %d fsyncs, %.1f pushes per fsync, at most %d in one", st.Pushes, st.Fsyncs, st.PushesPerFsync, biggest.Load())
	if st.Pushes != senders*each || int64(st.Fsyncs) != fsyncs.Load() {
		t.Fatalf("stats %+v, hook saw %d fsyncs", st, fsyncs.Load())
	}
	if st.Fsyncs > 2*each+1 || biggest.Load() < senders/2 {
		t.Fatalf("%d fsyncs for %d pushes (at most %d in one): the pushes did not share them", st.Fsyncs, st.Pushes, biggest.Load())
	}
}

// A failed fsync stops the store: the pushes it covered and every later
// one are refused Internal (temporary: the sender retries), nothing of
// the failed commit is delivered, and Close reports the failure. (The
// writer does not try again within the hour here.)
func TestFailedFsyncStopsPushes(t *testing.T) {
	fail := atomic.Bool{}
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quiet, RetryInterval: time.Hour, hooks: &hooks{sync: func(f *os.File, _ []Seq) error {
		if fail.Load() {
			return errors.New("EIO, say")
		}
		return syncData(f)
	}}})
	if err != nil {
		t.Fatal(err)
	}
	a := push(t, s, "d", []byte("before"))
	fail.Store(true)
	refused(t, s, "d", []byte("during"), ErrInternal)
	fail.Store(false)
	refused(t, s, "d", []byte("after"), ErrInternal)
	checkInbox(t, s, "d", []want{{a, []byte("before")}})
	if in := s.Inbox("d"); in.Pending != 0 || in.Blobs != 1 {
		t.Fatalf("inbox %+v", in)
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close did not report the failed fsync")
	}
	// Reopened, the store works again. The refused push may be there (its
	// bytes reached the file): a sender's retry makes it a duplicate,
	// which the recipient's dedup drops.
	s = open(t, dir, Options{})
	push(t, s, "d", []byte("reopened"))
}

func TestPushesOfAFailedCommitReleaseTheirRoom(t *testing.T) {
	fail := atomic.Bool{}
	fail.Store(true)
	s := open(t, "", Options{MaxInboxBlobs: 1, hooks: &hooks{sync: func(f *os.File, _ []Seq) error {
		if fail.Load() {
			return errors.New("EIO, say")
		}
		return syncData(f)
	}}})
	refused(t, s, "d", []byte("x"), ErrInternal)
	if in := s.Inbox("d"); in.Pending != 0 {
		t.Fatalf("inbox %+v: the failed push still holds room", in)
	}
}

// After a failed fsync the writer tries again every RetryInterval: while
// the disk still fails, pushes are refused and Err says why; once it
// works, the store takes pushes again by itself, and what it holds after
// a reopen is every acknowledged push, with nothing cut and no damage.
func TestStoreWritesAgainOnceTheDiskWorks(t *testing.T) {
	fail := atomic.Bool{}
	var tries atomic.Int64
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quiet, RetryInterval: 5 * time.Millisecond, hooks: &hooks{sync: func(f *os.File, pushes []Seq) error {
		if pushes == nil {
			tries.Add(1) // the writer trying again
		}
		if fail.Load() {
			return errors.New("ENOSPC, say")
		}
		return syncData(f)
	}}})
	if err != nil {
		t.Fatal(err)
	}
	a := push(t, s, "d", []byte("before"))
	fail.Store(true)
	refused(t, s, "d", []byte("during"), ErrInternal)
	if s.Err() == nil {
		t.Fatal("Err is nil while the store refuses pushes")
	}
	for tries.Load() < 2 { // it tried again, and failed
		runtime.Gosched()
	}
	refused(t, s, "d", []byte("still"), ErrInternal)
	fail.Store(false)
	var b Seq
	for {
		seq, err := s.Push(ctx(t), "d", []byte("after"))
		if err == nil {
			b = seq
			break
		}
		if !errors.Is(err, ErrInternal) {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	if s.Err() != nil {
		t.Fatalf("Err %v after a push succeeded", s.Err())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the store wrote again: %v", err)
	}
	s = open(t, dir, Options{})
	if st := s.Stats(); st.TornBytes != 0 {
		t.Fatalf("%d bytes cut at reopen", st.TornBytes)
	}
	checkInbox(t, s, "d", []want{{a, []byte("before")}, {b, []byte("after")}})
}
