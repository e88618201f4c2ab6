package relay

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Pushes admitted one after another without waiting get increasing
// sequences in that order, their callbacks run in that order, and none
// runs before the fsync that covers its push.
func TestPushAsyncKeepsOrderAndWaitsForTheFsync(t *testing.T) {
	var mu sync.Mutex
	durable := map[Seq]bool{}
	s := open(t, "", Options{MaxPushRate: -1, hooks: &hooks{sync: func(f *os.File, pushes []Seq) error {
		if err := syncData(f); err != nil {
			return err
		}
		mu.Lock()
		for _, seq := range pushes {
			durable[seq] = true
		}
		mu.Unlock()
		return nil
	}}})
	const n = 500
	var got []Seq
	var problems []string
	all := make(chan struct{})
	for i := range n {
		err := s.PushAsync("dev", []byte(fmt.Sprint(i)), func(seq Seq, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				problems = append(problems, err.Error())
			case !durable[seq]:
				problems = append(problems, fmt.Sprintf("push %d answered before its fsync", seq))
			}
			got = append(got, seq)
			if len(got) == n {
				close(all)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-ctx(t).Done():
		t.Fatal("not every callback ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(problems[0])
	}
	for i := 1; i < n; i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("callback %d has seq %d after %d", i, got[i], got[i-1])
		}
	}
	ss := session(t, s, "dev")
	for i := range n {
		if b := next(t, ss); string(b.Data) != fmt.Sprint(i) || b.Seq != got[i] {
			t.Fatalf("blob %d is %q seq %d, want %q seq %d", i, b.Data, b.Seq, fmt.Sprint(i), got[i])
		}
	}
}

// A push refused at admission returns its refusal and its callback never
// runs; the next push within the limits is taken.
func TestPushAsyncRefusalAtAdmission(t *testing.T) {
	s := open(t, "", Options{MaxPushRate: 1, PushBurst: 1, Now: newClock().Now})
	ran := make(chan Seq, 2)
	then := func(seq Seq, err error) { ran <- seq }
	if err := s.PushAsync("dev", []byte("a"), then); err != nil {
		t.Fatal(err)
	}
	if err := s.PushAsync("dev", []byte("b"), then); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("second push: %v, want ErrRateLimited", err)
	}
	if err := s.PushAsync("", []byte("c"), then); !errors.Is(err, ErrMalformed) {
		t.Fatalf("push to no device: %v, want ErrMalformed", err)
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if seq := <-ran; seq != 1 {
		t.Fatalf("first push got seq %d", seq)
	}
	select {
	case seq := <-ran:
		t.Fatalf("a refused push's callback ran (seq %d)", seq)
	default:
	}
}

// A group commit whose fsync fails refuses its pushes Internal through
// their callbacks, and every later push is refused at admission.
func TestPushAsyncFailedCommit(t *testing.T) {
	s := open(t, "", Options{MaxPushRate: -1, hooks: &hooks{sync: func(*os.File, []Seq) error {
		return errors.New("the disk is gone")
	}}})
	res := make(chan error, 1)
	if err := s.PushAsync("dev", []byte("a"), func(_ Seq, err error) { res <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, ErrInternal) {
			t.Fatalf("callback: %v, want ErrInternal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the callback never ran")
	}
	if err := s.PushAsync("dev", []byte("b"), func(Seq, error) {}); !errors.Is(err, ErrInternal) {
		t.Fatalf("push after the failure: %v, want ErrInternal", err)
	}
}

// AckRange deletes the device's blobs in the range, both ends included,
// and nothing of another device's inbox nor outside the range.
func TestAckRange(t *testing.T) {
	s := open(t, "", Options{MaxPushRate: -1})
	var mine, theirs []Seq
	for i := range 10 {
		mine = append(mine, push(t, s, "me", []byte(fmt.Sprint("m", i))))
		theirs = append(theirs, push(t, s, "other", []byte(fmt.Sprint("o", i))))
	}
	n, err := s.AckRange("me", mine[2], mine[5])
	if err != nil || n != 4 {
		t.Fatalf("AckRange: %d, %v; want 4 deleted", n, err)
	}
	if n, _ := s.AckRange("me", mine[2], mine[5]); n != 0 {
		t.Fatalf("acking the same range again deleted %d", n)
	}
	if n, _ := s.AckRange("me", mine[5], mine[2]); n != 0 {
		t.Fatalf("an empty range deleted %d", n)
	}
	if n, _ := s.AckRange("nobody", 0, 1<<62); n != 0 {
		t.Fatalf("an unknown device's range deleted %d", n)
	}
	if in := s.Inbox("me"); in.Blobs != 6 {
		t.Fatalf("my inbox holds %d blobs, want 6", in.Blobs)
	}
	if in := s.Inbox("other"); in.Blobs != 10 {
		t.Fatalf("the other inbox holds %d blobs, want 10", in.Blobs)
	}
	if n, _ := s.AckRange("me", 0, mine[9]); n != 6 {
		t.Fatalf("acking from 0 deleted %d, want 6", n)
	}
	if _, err := s.AckRange("", 1, 2); !errors.Is(err, ErrMalformed) {
		t.Fatalf("AckRange of no device: %v", err)
	}
	ss := session(t, s, "other")
	for i := range 10 {
		if b := next(t, ss); b.Seq != theirs[i] {
			t.Fatalf("other's blob %d has seq %d, want %d", i, b.Seq, theirs[i])
		}
	}
	if d := ss.Delivered(); d != theirs[9] {
		t.Fatalf("Delivered %d, want %d", d, theirs[9])
	}
	s.Close()
	s2 := open(t, s.dir, Options{MaxPushRate: -1})
	if in := s2.Inbox("me"); in.Blobs != 0 {
		t.Fatalf("after reopening, my inbox holds %d blobs: the range acks were not logged", in.Blobs)
	}
}
