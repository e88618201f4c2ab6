package sendq

// Flushing in place: a held batch written by the caller when the writer is
// idle, never waiting for a peer that does not read, in order with what
// the writer sends.

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"busbar/wire"
)

// heldFrame queues the event named name with EnqueueFrameHeld.
func heldFrame(t *testing.T, q *Queue, name string) bool {
	t.Helper()
	f := encoded(t, wire.New(wire.TypeStream, name).WithBody(make([]byte, 100)))
	defer f.Release()
	return q.EnqueueFrameHeld(f, time.Time{})
}

// smallBuffer shrinks c's socket send buffer, so that a test fills it
// with little.
func smallBuffer(t *testing.T, c net.Conn) {
	t.Helper()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		t.Fatalf("%T is not a Unix socket", c)
	}
	if err := uc.SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
}

func readCommands(t *testing.T, r *wire.Reader, want ...string) {
	t.Helper()
	for _, w := range want {
		m, err := r.ReadMessage()
		if err != nil || m.Value(wire.HeaderCommand) != w {
			t.Fatalf("want %s: %q %v", w, m, err)
		}
	}
}

func TestFlushWritesInPlaceWhenTheWriterIsIdle(t *testing.T) {
	a, b := pairInPlace(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	// Run is not started: only a write in place can deliver.
	heldFrame(t, q, "one")
	heldFrame(t, q, "two")
	q.Flush()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	readCommands(t, wire.NewReader(b), "one", "two")
	q.mu.Lock()
	left := len(q.items) + q.writing
	q.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d bytes or items still counted after a complete flush", left)
	}
}

// A flush in place (a broker's reader handing a destination what it
// routed) allocates nothing: one per request and one per reply would be
// most of a round trip's allocations.
func TestFlushInPlaceAllocatesNothing(t *testing.T) {
	a, b := pairInPlace(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Minute})
	f := encoded(t, wire.New(wire.TypeStream, "ch").WithBody(make([]byte, 100)))
	defer f.Release()
	sink := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if !q.EnqueueFrameHeld(f, time.Time{}) {
			t.Fatal("refused")
		}
		q.Flush()
		if _, err := io.ReadFull(b, sink[:len(f.B)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per flush in place", allocs)
	}
}

func TestFlushNeverWaitsForAPeerThatDoesNotRead(t *testing.T) {
	a, b := pairInPlace(t)
	smallBuffer(t, a)
	const n = 2000 // ~250 KB: far past what the socket pair buffers
	q := New(a, Limits{MaxMessages: n, MaxBytes: 64 << 20, WriteTimeout: 10 * time.Second})
	for i := range n {
		if !heldFrame(t, q, "m"+strconv.Itoa(i)) {
			t.Fatalf("refused frame %d", i)
		}
	}
	before := q.LastWrite()
	q.Flush() // the peer reads nothing yet: this must return, leaving a rest
	if len(q.out.rest) == 0 {
		t.Fatal("the socket took everything; the test needs a larger batch")
	}
	q.mu.Lock()
	counted := q.writing
	q.mu.Unlock()
	if counted != len(q.out.rest) {
		t.Fatalf("%d bytes left unwritten but %d counted against the limit", len(q.out.rest), counted)
	}
	if !q.LastWrite().After(before) {
		t.Fatal("bytes went to the socket but no progress was recorded")
	}
	// Another flush while a rest waits leaves it to the writer.
	heldFrame(t, q, "after")
	q.Flush()
	q.mu.Lock()
	queued := len(q.items)
	q.mu.Unlock()
	if queued != 1 {
		t.Fatalf("%d frames queued; a flush behind a rest must leave its frame to the writer", queued)
	}
	go q.Run()
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := wire.NewReader(b)
	for i := range n {
		readCommands(t, r, "m"+strconv.Itoa(i))
	}
	readCommands(t, r, "after")
	// The writer emptied the queue: the peer caught up, and a flush may
	// write in place again.
	for deadline := time.Now().Add(10 * time.Second); ; {
		q.wmu.Lock()
		behind := q.behind
		q.wmu.Unlock()
		if !behind {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still behind after the writer caught up")
		}
		runtime.Gosched()
	}
	q.Close(nil)
	<-q.Done()
}

func TestFlushOnAFrozenPeerRecordsNoProgress(t *testing.T) {
	a, _ := pairInPlace(t)
	smallBuffer(t, a)
	q := New(a, Limits{MaxMessages: 1 << 16, MaxBytes: 64 << 20, WriteTimeout: 10 * time.Second})
	// Fill the socket pair's buffers in place until nothing more goes.
	for i := 0; len(q.out.rest) == 0; i++ {
		for range 100 {
			heldFrame(t, q, "fill")
		}
		q.Flush()
		if i > 10_000 {
			t.Fatal("the socket never filled")
		}
	}
	// Drop what waits, as if a writer had sent it: the socket stays full,
	// and the next flush tries it afresh. Nobody reads this stream.
	q.out.rest, q.behind = q.out.rest[:0], false
	q.mu.Lock()
	q.writing = 0
	q.mu.Unlock()
	before := q.LastWrite()
	heldFrame(t, q, "stuck")
	q.Flush()
	if !q.LastWrite().Equal(before) {
		t.Fatal("a flush that wrote nothing counted as progress")
	}
	if len(q.out.rest) == 0 {
		t.Fatal("the frame neither went nor stayed")
	}
	q.Close(nil)
	a.Close()   // the writer's last flush fails at once
	_ = q.Run() // a closing queue's last flush is best effort: no error

}

func TestFlushKeepsOrderWithTheWriter(t *testing.T) {
	a, b := pairInPlace(t)
	const n = 20_000
	q := New(a, Limits{MaxMessages: n, MaxBytes: 64 << 20, WriteTimeout: 10 * time.Second})
	done := make(chan error, 1)
	go func() { done <- q.Run() }()
	var wg sync.WaitGroup
	wg.Go(func() {
		// Held batches flushed in place, mixed with messages that wake the
		// writer at once.
		for i := range n {
			name := "m" + strconv.Itoa(i)
			if i%7 == 0 {
				q.Enqueue(wire.New(wire.TypeStream, name), time.Time{})
			} else {
				f := encoded(t, wire.New(wire.TypeStream, name))
				q.EnqueueFrameHeld(f, time.Time{})
				f.Release()
			}
			if i%5 == 0 {
				q.Flush()
			}
		}
		q.Flush()
	})
	_ = b.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := wire.NewReader(b)
	for i := range n {
		if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != "m"+strconv.Itoa(i) {
			t.Fatalf("frame %d: %q %v", i, m, err)
		}
	}
	wg.Wait()
	q.Close(nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFlushWithoutADescriptorWakesTheWriter(t *testing.T) {
	a, b := net.Pipe() // no descriptor: nothing can be written in place
	t.Cleanup(func() { a.Close(); b.Close() })
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	if q.out.raw != nil {
		t.Fatal("net.Pipe has a descriptor?")
	}
	heldFrame(t, q, "woken")
	q.Flush()
	go q.Run()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	readCommands(t, wire.NewReader(b), "woken")
	q.Close(nil)
	<-q.Done()
}

func TestAWaitForRoomWakesAWriterOfHeldFrames(t *testing.T) {
	a, b := pairInPlace(t)
	q := New(a, Limits{MaxMessages: 2, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	go q.Run()
	heldFrame(t, q, "one")
	heldFrame(t, q, "two") // full, and the writer was never woken
	read := make(chan error, 1)
	go func() {
		_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := wire.NewReader(b)
		for _, want := range []string{"one", "two", "three"} {
			if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != want {
				read <- fmt.Errorf("want %s: %q %v", want, m, err)
				return
			}
		}
		read <- nil
	}()
	f := encoded(t, wire.New(wire.TypeStream, "three"))
	defer f.Release()
	if !q.EnqueueFrameWithin(f, time.Time{}, 10*time.Second, false) {
		t.Fatal("no room came: the held frames were never written")
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	q.Close(nil)
	<-q.Done()
}
