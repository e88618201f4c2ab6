package edge

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

// writerPair is a Writer on one end of a pipe and a reader of lines on
// the other; Stopped's error arrives on stopped.
func writerPair(t *testing.T, opts WriterOptions) (w *Writer, r *bufio.Reader, peer net.Conn, stopped chan error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	stopped = make(chan error, 1)
	opts.Stopped = func(err error) { stopped <- err }
	w = NewWriter(a, opts)
	t.Cleanup(func() { w.Close(); w.Wait() })
	return w, bufio.NewReader(b), b, stopped
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	s, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The queue holds Queue frames and refuses the one past it; after Close
// it refuses every frame, and Wait returns without Start.
func TestWriterQueueBound(t *testing.T) {
	w, _, _, _ := writerPair(t, WriterOptions{Queue: 2})
	for i := range 2 {
		if !w.Queue(Frame{Bytes: []byte("x\n")}) {
			t.Fatalf("frame %d of 2 refused", i+1)
		}
	}
	if w.Queue(Frame{Bytes: []byte("x\n")}) {
		t.Fatal("frame 3, one past Queue, was queued")
	}
	if w.Len() != 2 {
		t.Fatalf("Len %d", w.Len())
	}
	w.Close()
	w.Wait()
	w.Start() // after Close: nothing
	if w.Queue(Frame{Bytes: []byte("x\n")}) {
		t.Fatal("queued after Close")
	}
}

// A frame whose deadline has passed when the writer comes to it is
// dropped and counted, never written; one with time left is stamped with
// what is left (no more than its budget), and one without a deadline is
// written as it is, all in the order queued.
func TestWriterDropsExpiredAndStampsTheRest(t *testing.T) {
	var lefts []time.Duration
	w, r, _, _ := writerPair(t, WriterOptions{Queue: 8, Stamp: func(b []byte, left time.Duration) {
		lefts = append(lefts, left)
		b[0] = 'S'
	}})
	const budget = time.Hour
	queued := time.Now()
	w.Queue(Frame{Bytes: []byte("a\n")})
	w.Queue(Frame{Bytes: []byte("b\n"), Deadline: queued})                       // at its deadline: expired
	w.Queue(Frame{Bytes: []byte("c\n"), Deadline: time.Now().Add(-time.Second)}) // past it
	w.Queue(Frame{Bytes: []byte("d\n"), Deadline: queued.Add(budget)})
	w.Start()
	for _, want := range []string{"a\n", "S\n"} {
		if got := readLine(t, r); got != want {
			t.Fatalf("read %q, want %q", got, want)
		}
	}
	if w.Expired() != 2 {
		t.Fatalf("Expired %d, want 2", w.Expired())
	}
	if len(lefts) != 1 || lefts[0] <= 0 || lefts[0] > budget {
		t.Fatalf("stamped with %v, want one time left in (0, %v]", lefts, budget)
	}
}

// Finish writes what is queued, then its last frame, flushes and ends
// with nil; it may come before Start.
func TestWriterFinish(t *testing.T) {
	w, r, _, stopped := writerPair(t, WriterOptions{Queue: 4})
	for i := range 3 {
		w.Queue(Frame{Bytes: []byte(strconv.Itoa(i) + "\n")})
	}
	w.Finish([]byte("bye\n"))
	w.Start()
	for _, want := range []string{"0\n", "1\n", "2\n", "bye\n"} {
		if got := readLine(t, r); got != want {
			t.Fatalf("read %q, want %q", got, want)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stopped(%v) after Finish", err)
	}
	w.Wait()
}

// A peer that is gone ends the writer with the write's error; Close ends
// it with ErrWriterClosed.
func TestWriterStops(t *testing.T) {
	w, _, peer, stopped := writerPair(t, WriterOptions{Queue: 1})
	w.Start()
	peer.Close()
	w.Queue(Frame{Bytes: []byte("x\n")})
	if err := <-stopped; err == nil || errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Stopped(%v), want the write's error", err)
	}
	w.Wait()

	w, _, _, stopped = writerPair(t, WriterOptions{Queue: 1})
	w.Start()
	w.Close()
	if err := <-stopped; !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Stopped(%v) after Close", err)
	}
	w.Wait()
}

// A peer that takes nothing for WriteTimeout fails the writer.
func TestWriterWriteTimeout(t *testing.T) {
	w, _, _, stopped := writerPair(t, WriterOptions{Queue: 1, WriteTimeout: time.Millisecond})
	w.Queue(Frame{Bytes: []byte("never read\n")})
	w.Start()
	var ne net.Error
	if err := <-stopped; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Stopped(%v), want a timeout", err)
	}
}

// A message writer hands each frame to its send as one message, in order;
// a frame whose deadline passed while it waited is never sent; an error
// from send ends the writer and is what Stopped hears.
func TestMessageWriterSendsEachFrameOnceInOrderAndDropsTheExpired(t *testing.T) {
	sent := make(chan string, 8)
	release := make(chan struct{})
	fail := errors.New("peer gone")
	stopped := make(chan error, 1)
	first := true
	w := NewMessageWriter(func(frame []byte) error {
		if first { // hold the writer on the first frame while the rest queue up
			first = false
			<-release
		}
		if string(frame) == "fail" {
			return fail
		}
		sent <- string(frame)
		return nil
	}, WriterOptions{Queue: 4, Stopped: func(err error) { stopped <- err }})
	t.Cleanup(func() { w.Close(); w.Wait() })
	w.Start()
	w.Queue(Frame{Bytes: []byte("one")})
	for len(w.q) != 0 { // the writer holds "one" in send
		time.Sleep(time.Millisecond)
	}
	past := time.Now().Add(-time.Nanosecond)
	w.Queue(Frame{Bytes: []byte("expired"), Deadline: past})
	w.Queue(Frame{Bytes: []byte("two"), Deadline: time.Now().Add(time.Hour)})
	w.Queue(Frame{Bytes: []byte("fail")})
	close(release)
	for _, want := range []string{"one", "two"} {
		if got := <-sent; got != want {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
	if err := <-stopped; !errors.Is(err, fail) {
		t.Fatalf("Stopped heard %v, want %v", err, fail)
	}
	if n := w.Expired(); n != 1 {
		t.Fatalf("%d frames expired, want 1", n)
	}
	select {
	case m := <-sent:
		t.Fatalf("sent %q after the failure", m)
	default:
	}
}
