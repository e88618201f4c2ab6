package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestEachInboxInArrivalOrder(t *testing.T) {
	clk := newClock()
	s := open(t, "", Options{Now: clk.Now})
	wants := map[string][]want{}
	for i := range 30 {
		dev := []string{"alice-phone", "bob-laptop", "carol.tablet"}[i%3]
		data := []byte(fmt.Sprintf("blob %d for %s", i, dev))
		seq := push(t, s, dev, data)
		wants[dev] = append(wants[dev], want{seq, data})
		clk.Add(time.Second)
	}
	for dev, w := range wants {
		checkInbox(t, s, dev, w)
	}
	ss := session(t, s, "alice-phone")
	if b := next(t, ss); !b.Pushed.Equal(newClock().Now()) {
		t.Fatalf("pushed at %v, want the clock's %v", b.Pushed, newClock().Now())
	}
	if st := s.Stats(); st.Inboxes != 3 || st.Blobs != 30 || st.Pushes != 30 {
		t.Fatalf("stats %+v", st)
	}
	var bobBytes int64
	for _, w := range wants["bob-laptop"] {
		bobBytes += int64(len(w.data))
	}
	if in := s.Inbox("bob-laptop"); in.Blobs != 10 || in.Bytes != bobBytes {
		t.Fatalf("bob's inbox %+v", in)
	}
}

func TestOncePerSessionAgainOnANewOne(t *testing.T) {
	s := open(t, "", Options{})
	var w []want
	for i := range 3 {
		data := []byte{byte(i + 1)}
		w = append(w, want{push(t, s, "d", data), data})
	}
	ss := session(t, s, "d")
	for i := range 3 {
		if b := next(t, ss); b.Seq != w[i].seq {
			t.Fatalf("blob %d: seq %d, want %d", i, b.Seq, w[i].seq)
		}
	}
	drained(t, ss) // delivered once in this session, not acked: not again
	if err := s.Ack("d", w[1].seq); err != nil {
		t.Fatal(err)
	}
	checkInbox(t, s, "d", []want{w[0], w[2]}) // a new session: what is not acked, oldest first
	drained(t, ss)
	seq := push(t, s, "d", []byte("new"))
	if b := next(t, ss); b.Seq != seq { // the old session goes on with new pushes
		t.Fatalf("seq %d, want %d", b.Seq, seq)
	}
}

func TestNextWaitsForAPush(t *testing.T) {
	s := open(t, "", Options{})
	ss := session(t, s, "d")
	got := make(chan Blob)
	go func() {
		b, err := ss.Next(ctx(t))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	for s.waiting("d") == 0 {
		time.Sleep(time.Millisecond)
	}
	seq := push(t, s, "d", []byte("hello"))
	if b := <-got; b.Seq != seq || string(b.Data) != "hello" {
		t.Fatalf("got %d %q", b.Seq, b.Data)
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ss.Next(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("next with a cancelled ctx: %v", err)
	}
}

// waiting is how many sessions wait in Next for device.
func (s *Store) waiting(device string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ib := s.inboxes[device]; ib != nil {
		return ib.waiters
	}
	return 0
}

func TestAckDeletesOnlyFromTheAckingDevicesInbox(t *testing.T) {
	s := open(t, "", Options{})
	a := push(t, s, "alice", []byte("for alice"))
	b := push(t, s, "bob", []byte("for bob"))
	if err := s.Ack("bob", a); !errors.Is(err, ErrNoSuchBlob) {
		t.Fatalf("bob acks alice's blob: %v, want ErrNoSuchBlob", err)
	}
	if err := s.Ack("mallory", b); !errors.Is(err, ErrNoSuchBlob) {
		t.Fatalf("a device with no inbox acks bob's blob: %v", err)
	}
	checkInbox(t, s, "alice", []want{{a, []byte("for alice")}})
	checkInbox(t, s, "bob", []want{{b, []byte("for bob")}})
	if err := s.Ack("alice", a); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack("alice", a); !errors.Is(err, ErrNoSuchBlob) {
		t.Fatalf("second ack: %v", err)
	}
	if err := s.Ack("alice", 0); !errors.Is(err, ErrNoSuchBlob) {
		t.Fatalf("ack of seq 0: %v", err)
	}
	if err := s.Ack("not a device", b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ack with a bad device id: %v", err)
	}
	checkInbox(t, s, "alice", nil)
	checkInbox(t, s, "bob", []want{{b, []byte("for bob")}})
	if st := s.Stats(); st.Acks != 1 || st.Blobs != 1 || st.Inboxes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReopenKeepsInboxesAndSequence(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	var w []want
	for i := range 10 {
		data := []byte(fmt.Sprint("blob ", i))
		w = append(w, want{push(t, s, "d", data), data})
	}
	for _, i := range []int{0, 3, 9} {
		if err := s.Ack("d", w[i].seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, Options{})
	checkInbox(t, s, "d", []want{w[1], w[2], w[4], w[5], w[6], w[7], w[8]})
	if seq := push(t, s, "d", []byte("after")); seq <= w[9].seq {
		t.Fatalf("seq %d after reopening, not above %d", seq, w[9].seq)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	s := open(t, "", Options{})
	ss := session(t, s, "d")
	errc := make(chan error)
	go func() {
		_, err := ss.Next(context.Background())
		errc <- err
	}()
	for s.waiting("d") == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Next at Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Push(ctx(t), "d", []byte("x")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("push after Close: %v", err)
	}
	if _, err := ss.Next(ctx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("next after Close: %v", err)
	}
	if _, err := s.Session("d"); !errors.Is(err, ErrClosed) {
		t.Fatalf("session after Close: %v", err)
	}
	if err := s.Ack("d", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("ack after Close: %v", err)
	}
}

func TestOneStorePerDirectory(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	if s2, err := Open(dir, Options{Logger: quiet}); err == nil {
		s2.Close()
		t.Fatal("a second store opened the same directory")
	}
	s.Close()
	open(t, dir, Options{}) // free again
}

func TestPushWithDoneContext(t *testing.T) {
	s := open(t, "", Options{})
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Push(c, "d", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("push with a cancelled ctx: %v", err)
	}
	if s.Inbox("d").Blobs != 0 {
		t.Fatal("a push with a cancelled ctx was stored")
	}
}

func TestPushKeepsItsOwnCopy(t *testing.T) {
	s := open(t, "", Options{})
	blob := []byte("original")
	seq := push(t, s, "d", blob)
	copy(blob, "CHANGED!")
	checkInbox(t, s, "d", []want{{seq, []byte("original")}})
}

func TestOpenMakesAPrivateDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "relay")
	s := open(t, dir, Options{})
	push(t, s, "d", []byte("x"))
	s.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory %v %v, want mode 0700", fi.Mode(), err)
	}
	for _, f := range segFiles(t, dir) {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
	}
}
