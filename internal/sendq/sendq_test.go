package sendq

// The bounded outbound queue: its limits at and past the edge, deadlines
// and ttl, stalled peers, waiting enqueues, shared frames and write-through.

import (
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"busbar/internal/hotpath"
	"busbar/internal/leakcheck"
	"busbar/transport"
	"busbar/wire"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func pair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	a, b, err := transport.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pairInPlace is pair, for a test of writing in place from the caller's
// goroutine: skipped where the system gives no descriptor writes
// (fd_windows.go).
func pairInPlace(t *testing.T) (a, b net.Conn) {
	t.Helper()
	a, b = pair(t)
	if rawConn(a) == nil {
		t.Skip("this system has no writes in place")
	}
	return a, b
}

func TestLimitsAtAndPastEdge(t *testing.T) {
	a, _ := pair(t)
	m := wire.New(wire.TypeEvent, "x")
	q := New(a, Limits{MaxMessages: 2, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	for range 2 {
		if !q.Enqueue(m, time.Time{}) {
			t.Fatal("refused at the message limit")
		}
	}
	if q.Enqueue(m, time.Time{}) {
		t.Fatal("accepted past the message limit")
	}
	cost := frameCost(m)
	q = New(a, Limits{MaxMessages: 100, MaxBytes: 2 * cost, WriteTimeout: time.Second})
	for range 2 {
		if !q.Enqueue(m, time.Time{}) {
			t.Fatal("refused at the byte limit")
		}
	}
	if q.Enqueue(m, time.Time{}) {
		t.Fatal("accepted past the byte limit")
	}
}

// Paced frames stop at the pace mark, a ReserveShare below each limit;
// other frames go on into the reserve up to the limits. A queue (not
// started: nothing is written) is filled at and past each edge.
func TestPacedFramesLeaveTheReserveFree(t *testing.T) {
	a, _ := pair(t)
	f := NewFrame()
	defer f.Release()
	f.B = append(f.B, make([]byte, 100)...)
	for _, tc := range []struct {
		name       string
		l          Limits
		mark, full int // frames queued at the pace mark and at the limit
	}{
		{"messages", Limits{MaxMessages: 8, MaxBytes: 1 << 20}, 6, 8},
		{"bytes", Limits{MaxMessages: 100, MaxBytes: 800}, 6, 8},
		{"messages under ReserveShare", Limits{MaxMessages: 3, MaxBytes: 1 << 20}, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.l.WriteTimeout = time.Second
			q := New(a, tc.l)
			defer releaseFrames(q.items)
			for i := range tc.mark {
				if !q.EnqueuePacedHeld(f, time.Time{}) {
					t.Fatalf("paced frame %d refused below the mark", i+1)
				}
			}
			if q.EnqueuePacedHeld(f, time.Time{}) || q.EnqueueFrameWithin(f, time.Time{}, time.Millisecond, true) {
				t.Fatal("a paced frame was queued past the mark")
			}
			for i := tc.mark; i < tc.full; i++ {
				if !q.EnqueueFrameHeld(f, time.Time{}) {
					t.Fatalf("frame %d refused in the reserve", i+1)
				}
			}
			if q.EnqueueFrameHeld(f, time.Time{}) {
				t.Fatal("a frame was queued past the limit")
			}
			if n, _ := q.Depth(); n != tc.full {
				t.Fatalf("%d queued, want %d", n, tc.full)
			}
		})
	}
}

func TestDeadlinesAndTTL(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	expired := wire.New(wire.TypeEvent, "old").WithHeader(wire.HeaderID, "1")
	fresh := wire.New(wire.TypeEvent, "new").WithHeader(wire.HeaderID, "2")
	plain := wire.New(wire.TypeEvent, "plain").WithHeader(wire.HeaderID, "3")
	q.Enqueue(expired, time.Now().Add(-time.Millisecond))
	q.Enqueue(fresh, time.Now().Add(2*time.Second))
	q.Enqueue(plain, time.Time{})
	done := make(chan error, 1)
	go func() { done <- q.Run() }()
	r := wire.NewReader(b)
	got, err := r.ReadMessage()
	if err != nil || got.Value(wire.HeaderCommand) != "new" {
		t.Fatalf("first frame %q %v: the expired message must be dropped", got, err)
	}
	ttl, err := strconv.Atoi(got.Value(wire.HeaderTTL))
	if err != nil || ttl <= 0 || ttl > 2000 {
		t.Fatalf("ttl %q", got.Value(wire.HeaderTTL))
	}
	if fresh.Value(wire.HeaderTTL) != "" {
		t.Fatal("the queued message itself was changed")
	}
	if got, _ := r.ReadMessage(); got.Value(wire.HeaderCommand) != "plain" || got.Value(wire.HeaderTTL) != "" {
		t.Fatalf("second frame %q", got)
	}
	if q.Expired() != 1 {
		t.Fatalf("expired = %d", q.Expired())
	}
	if !q.Close(wire.Empty()) || q.Close(nil) {
		t.Fatal("Close must close once")
	}
	if q.Enqueue(plain, time.Time{}) {
		t.Fatal("queued after Close")
	}
	if got, err := r.ReadMessage(); err != nil || !got.IsHeartbeat() {
		t.Fatalf("final frame %q %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-q.Done()
}

func TestUnsendableMessageIsSkipped(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	q.Enqueue(wire.Empty().WithHeader("bad key", "v"), time.Time{})
	q.Enqueue(wire.New(wire.TypeEvent, "ok"), time.Time{})
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	got, err := wire.NewReader(b).ReadMessage()
	if err != nil || got.Value(wire.HeaderCommand) != "ok" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestStalledPeerFailsRun(t *testing.T) {
	a, _ := pair(t) // nobody reads b
	q := New(a, Limits{MaxMessages: 1000, MaxBytes: 64 << 20, WriteTimeout: 200 * time.Millisecond})
	big := wire.Empty().WithBody(make([]byte, 1<<20))
	done := make(chan error, 1)
	go func() { done <- q.Run() }()
	for range 16 {
		q.Enqueue(big, time.Time{})
	}
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Run = %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not give up on a stalled peer")
	}
	if !q.Closing() || q.Enqueue(big, time.Time{}) {
		t.Fatal("queue still open after a failed write")
	}
}

func TestOversizeFrameFitsAnEmptyQueue(t *testing.T) {
	a, _ := pair(t)
	big := wire.Empty().WithBody(make([]byte, 4096))
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1024, WriteTimeout: time.Second})
	if !q.Enqueue(big, time.Time{}) {
		t.Fatal("an oversize frame was refused by an empty queue")
	}
	if q.Enqueue(wire.Empty(), time.Time{}) {
		t.Fatal("accepted more behind an oversize frame")
	}
}

// encoded returns m as a shared frame holding one reference.
func encoded(t *testing.T, m *wire.Message) *Frame {
	t.Helper()
	f := NewFrame()
	b, err := wire.AppendFrame(f.B, m)
	if err != nil {
		t.Fatal(err)
	}
	f.B = b
	return f
}

func TestEnqueueFrameWait(t *testing.T) {
	a, b := pair(t)
	m := wire.New(wire.TypeStream, "x").WithBody(make([]byte, 512))
	q := New(a, Limits{MaxMessages: 2, MaxBytes: 1 << 20, WriteTimeout: 5 * time.Second})
	go q.Run()
	defer func() { q.Close(nil); <-q.Done() }()
	// Three producers push 300 frames through a 2-message queue; the
	// reader sees every one: waiting producers are never lost.
	const n = 300
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			for range n / 3 {
				f := NewFrame()
				f.B, _ = wire.AppendFrame(f.B, m)
				err := q.EnqueueFrameWait(context.Background(), f, time.Time{})
				f.Release()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	r := wire.NewReader(b)
	for i := range n {
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := r.ReadMessage(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f := encoded(t, m)
	defer f.Release()
	waitEnds(t, a, func(q *Queue, ctx context.Context) error { return q.EnqueueFrameWait(ctx, f, time.Time{}) })
}

// waitEnds checks that wait, a wait for room, gives up with ctx's error on
// a queue that stays full, and with ErrClosed once it is closed.
func waitEnds(t *testing.T, nc net.Conn, wait func(*Queue, context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	q := New(nc, Limits{MaxMessages: 1, MaxBytes: 1 << 20, WriteTimeout: time.Second}) // never run: stays full
	q.Enqueue(wire.Empty(), time.Time{})
	if err := wait(q, ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("full queue: %v", err)
	}
	q.Close(nil)
	if err := wait(q, context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed queue: %v", err)
	}
}

func TestSharedFrameFansOut(t *testing.T) {
	m := wire.New(wire.TypeStream, "x").WithHeader(wire.HeaderID, "1").WithBody([]byte("payload"))
	var v hotpath.View
	if err := hotpath.ParseView(m.ToBytes(), &v); err != nil {
		t.Fatal(err)
	}
	f := NewFrame()
	f.B, f.TTLOff = hotpath.AppendForward(f.B, &v, "src.bus", true)
	var readers []*wire.Reader
	var queues []*Queue
	for range 3 {
		a, b := pair(t)
		q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
		if !q.EnqueueFrame(f, time.Now().Add(3*time.Second)) {
			t.Fatal("refused")
		}
		q.EnqueueFrame(f, time.Now().Add(-time.Second)) // expired: never sent
		go q.Run()
		queues = append(queues, q)
		readers = append(readers, wire.NewReader(b))
	}
	f.Release() // the producer's reference; the queues hold theirs
	for _, r := range readers {
		got, err := r.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		ttl, _ := strconv.Atoi(got.Value(wire.HeaderTTL))
		if got.Value(wire.HeaderFrom) != "src.bus" || string(got.Body()) != "payload" || ttl <= 0 || ttl > 3000 {
			t.Fatalf("delivered %q", got)
		}
	}
	for _, q := range queues {
		q.Close(wire.Empty())
		<-q.Done()
		if q.Expired() != 1 {
			t.Fatalf("expired %d", q.Expired())
		}
	}
	if n := f.refs.Load(); n != 0 {
		t.Fatalf("%d references left", n)
	}
}

func TestWriteThrough(t *testing.T) {
	a, b := pair(t)
	q := New(a, Limits{MaxMessages: 10, MaxBytes: 1 << 20, WriteTimeout: time.Second})
	r := wire.NewReader(b)
	// Idle (Run not even started): the caller writes the frame itself.
	if !q.WriteThrough(wire.New(wire.TypeRequest, "direct"), time.Now().Add(time.Second)) {
		t.Fatal("an idle queue refused a write-through")
	}
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != "direct" || m.Value(wire.HeaderTTL) == "" {
		t.Fatalf("%q %v", m, err)
	}
	// Something queued: refused, so order is kept.
	q.Enqueue(wire.New(wire.TypeEvent, "first"), time.Time{})
	if q.WriteThrough(wire.New(wire.TypeEvent, "second"), time.Time{}) {
		t.Fatal("wrote through past a queued message")
	}
	q.Enqueue(wire.New(wire.TypeEvent, "second"), time.Time{})
	go q.Run()
	for _, want := range []string{"first", "second"} {
		if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != want {
			t.Fatalf("want %s: %q %v", want, m, err)
		}
	}
	q.Close(nil)
	<-q.Done()
	if q.WriteThrough(wire.New(wire.TypeEvent, "late"), time.Time{}) {
		t.Fatal("wrote through a closed queue")
	}
}

// gatedConn takes its first write and holds every later one until gate
// closes: a reader that read one buffer's worth and then stopped.
type gatedConn struct {
	net.Conn
	writes int
	gate   chan struct{}
}

func (g *gatedConn) Write(p []byte) (int, error) {
	if g.writes++; g.writes > 1 {
		<-g.gate
	}
	return len(p), nil
}

// TestRoomFreedAsABatchFlushes: a producer waiting for room is let in as
// soon as the writer has flushed part of its batch, not only once the
// whole batch is written: a slow reader paces producers by the buffer,
// never strands them for a whole batch. Frames encoded in place (a
// broker's forwards, a client's Emit), which the writer hands to the
// socket without its buffer, free their room and count as progress the
// same way.
func TestRoomFreedAsABatchFlushes(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		t.Run(map[bool]string{false: "shared frames", true: "in place"}[inPlace], func(t *testing.T) {
			a, _ := pair(t)
			g := &gatedConn{Conn: a, gate: make(chan struct{})}
			m := wire.New(wire.TypeStream, "x").WithBody(make([]byte, 1000))
			size := len(encoded(t, m).B)
			q := New(g, Limits{MaxMessages: 1000, MaxBytes: 48 * size, WriteTimeout: 10 * time.Second})
			for range 48 {
				f := encoded(t, m)
				if inPlace {
					b, ok := q.Reserve(len(f.B))
					if !ok {
						t.Fatal("refused below the byte limit")
					}
					*b = append(*b, f.B...)
					q.Commit(-1, time.Time{})
				} else if !q.EnqueueFrame(f, time.Time{}) {
					t.Fatal("refused below the byte limit")
				}
				f.Release()
			}
			f := encoded(t, m)
			defer f.Release()
			if q.EnqueueFrame(f, time.Time{}) {
				t.Fatal("accepted past the byte limit")
			}
			start := q.LastWrite()
			go q.Run()
			defer func() { close(g.gate); q.Close(nil); <-q.Done() }()
			// The writer's first write goes through and its second one is
			// held, so the batch cannot end while this waits.
			if !q.EnqueueFrameWithin(f, time.Time{}, 10*time.Second, false) {
				t.Fatal("no room given back while the batch's first write was written")
			}
			if !q.LastWrite().After(start) {
				t.Fatal("the batch's first write was not recorded as progress")
			}
		})
	}
}

// A queue holds one item per message and the collector scans them all on
// every cycle: an item stays 48 bytes.
func TestQueuedItemStaysSmall(t *testing.T) {
	if got := unsafe.Sizeof(item{}); got != 48 {
		t.Fatalf("item is %d bytes, want 48", got)
	}
	if wire.MaxMessageBytes > math.MaxInt32 {
		t.Fatalf("wire.MaxMessageBytes (%d) does not fit an item's int32 sizes", wire.MaxMessageBytes)
	}
}
