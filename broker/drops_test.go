package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// Every message the broker discards without an answer is counted under
// its reason: a refused stream, a subscriber whose queue stayed full, a
// subscriber whose writer is stuck, an answer matching no call, and an
// answer its asker's full queue could not take. The sums Dropped and
// DroppedReplies add them up.
func TestDropsAreCountedByReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pubAndSub(t)
		// From here on sub never reads: its writer blocks on the first
		// frame and its queue holds two more.
		pc, sc := b.dir.lookup("pub"), b.dir.lookup("sub")
		var v hotpath.View
		stream := wire.New(wire.TypeStream, "ch").WithHeader(wire.HeaderID, "x").ToBytes()
		b.dispatch(pc, stream, &v)
		synctest.Wait() // the writer took it, and blocks
		b.dispatch(pc, stream, &v)
		b.dispatch(pc, stream, &v)
		if got := b.Stats().Drops; got != ([numDropReasons]int64{}) {
			t.Fatalf("drops before the queue is full: %v", got)
		}
		b.dispatch(pc, stream, &v) // full, writer recently active: waits frozenAfter, then drops
		want := [numDropReasons]int64{}
		want[DropQueueFull] = 1
		checkDrops(t, b, want)

		time.Sleep(stuckAfter + time.Millisecond) // virtual time: the writer is now stuck
		b.dispatch(pc, stream, &v)
		want[DropStuckReader] = 1
		checkDrops(t, b, want)

		b.dispatch(pc, wire.New(wire.TypeStream, "ch").WithHeader(wire.HeaderTTL, "soon").ToBytes(), &v)
		want[DropStreamRefused] = 1
		checkDrops(t, b, want)

		b.dispatch(pc, wire.New(wire.TypeResponse, "ch").WithHeader(wire.HeaderReplyTo, "no-such-call").ToBytes(), &v)
		want[DropUnmatchedAnswer] = 1
		checkDrops(t, b, want)

		// sub asks for something the broker refuses; its full queue cannot take the answer.
		b.dispatch(sc, wire.New(wire.TypeRequest, "ch").WithHeader(wire.HeaderID, "q").ToBytes(), &v)
		want[DropAnswerUndeliverable] = 1
		checkDrops(t, b, want)

		s := b.Stats()
		if s.Dropped != 3 || s.DroppedReplies != 2 {
			t.Fatalf("Dropped %d, DroppedReplies %d; want 3 and 2", s.Dropped, s.DroppedReplies)
		}
	})
}

// pubAndSub is a broker in a synctest bubble with nodes "pub" and "sub",
// sub subscribed to "ch" and reading nothing more from here on. Its queue
// holds two messages (no reserve: sendq.ReserveShare).
func pubAndSub(t *testing.T) *Broker {
	b, _, _ := pubAndSubQueue(t, 2)
	return b
}

// pubAndSubQueue is pubAndSub with queues of maxQueue messages, and sub,
// and the principal's secret for more nodes.
func pubAndSubQueue(t *testing.T, maxQueue int) (*Broker, *rawNode, string) {
	t.Helper()
	b, secret := newTestBroker(t, Options{MaxQueueMessages: maxQueue, HeartbeatInterval: time.Hour, LeaseTimeout: 2 * time.Hour})
	pub := join(t, b, secret, "pub")
	sub := join(t, b, secret, "sub")
	t.Cleanup(func() {
		_ = pub.nc.Close()
		_ = sub.nc.Close()
		if err := b.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	subscribeRaw(t, sub, "ch")
	synctest.Wait()
	return b, sub, secret
}

// publisher returns a function that routes one stream message on "ch"
// from pub, as pub's reader would.
func publisher(b *Broker) func() {
	pc := b.dir.lookup("pub")
	var v hotpath.View
	stream := wire.New(wire.TypeStream, "ch").WithHeader(wire.HeaderID, "x").ToBytes()
	return func() { b.dispatch(pc, stream, &v) }
}

// subscribeRaw subscribes n to channel.
func subscribeRaw(t *testing.T, n *rawNode, channel string) {
	t.Helper()
	n.send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte(channel)))
	if m, err := n.r.ReadMessage(); err != nil || m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("subscribe: %v %v", err, m)
	}
}

// wantStalls checks the stream stalls and queue_full drops so far.
func wantStalls(t *testing.T, b *Broker, stalls, queueFull int64) {
	t.Helper()
	if s := b.Stats(); s.StreamStalls != stalls || s.Drops[DropQueueFull] != queueFull {
		t.Fatalf("%d stalls, %d queue_full drops; want %d and %d", s.StreamStalls, s.Drops[DropQueueFull], stalls, queueFull)
	}
}

func checkDrops(t *testing.T, b *Broker, want [numDropReasons]int64) {
	t.Helper()
	if got := b.Stats().Drops; got != want {
		for _, r := range DropReasons() {
			if got[r] != want[r] {
				t.Errorf("%s: %d drops, want %d", r, got[r], want[r])
			}
		}
		t.FailNow()
	}
}

func TestDropReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range DropReasons() {
		n := r.String()
		if n == "" || n == "unknown" || seen[n] {
			t.Errorf("reason %d has name %q", r, n)
		}
		seen[n] = true
	}
	if len(seen) != int(numDropReasons) {
		t.Fatalf("%d names for %d reasons", len(seen), numDropReasons)
	}
	if DropReason(numDropReasons).String() != "unknown" {
		t.Fatal("a reason past the last has a name")
	}
}

func TestClipAtAndPastItsLimit(t *testing.T) {
	at := strings.Repeat("a", MaxLoggedString)
	if clip(at) != at {
		t.Fatal("a string of exactly MaxLoggedString bytes was cut")
	}
	if got, want := clip(at+"b"), at+"…(257 bytes)"; got != want {
		t.Fatalf("clip of %d bytes: %q", len(at)+1, got)
	}
}

// A peer cannot make the broker write a log line as long as its frame:
// what it supplies is clipped, whether in a hello that fails to
// authenticate (a principal name of almost MaxHelloBytes) or in a refused
// command (a 900 KB command name).
func TestPeerStringsAreClippedInTheLog(t *testing.T) {
	var mu sync.Mutex
	var logged bytes.Buffer
	h := slog.NewTextHandler(lockedWriter{&mu, &logged}, nil)
	b, secret := newTestBroker(t, Options{Logger: slog.New(h)})
	defer func() { _ = b.Shutdown(context.Background()) }()

	cl, srv := net.Pipe()
	go b.ServeConn(srv)
	r, w := wire.NewReader(cl), wire.NewWriter(cl)
	if _, err := r.ReadMessage(); err != nil { // bus.info
		t.Fatal(err)
	}
	body, _ := json.Marshal(wire.Hello{Node: "n", Principal: strings.Repeat("p", MaxHelloBytes-200), Secret: secret})
	if err := w.WriteMessage(wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body)); err != nil {
		t.Fatal(err)
	}
	_ = w.Flush()
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderResult) != string(wire.ResultAuth) {
		t.Fatalf("hello with an unknown principal: %v %v", err, m)
	}
	_ = cl.Close()

	n := join(t, b, secret, "n")
	defer func() { _ = n.nc.Close() }()
	n.send(t, wire.New(wire.TypeRequest, "bus.no"+strings.Repeat("x", 900<<10)).WithHeader(wire.HeaderID, "s"))
	if m, err := n.r.ReadMessage(); err != nil || m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("unknown command: %v %v", err, m)
	}
	mu.Lock()
	defer mu.Unlock()
	for line := range strings.Lines(logged.String()) {
		if len(line) > 4*MaxLoggedString {
			t.Fatalf("a log line of %d bytes: %.200q…", len(line), line)
		}
	}
	for _, want := range []string{"authentication refused", "refused"} {
		if !strings.Contains(logged.String(), want) {
			t.Fatalf("%q was not logged: %q", want, logged.String())
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// A subscriber that froze costs its publisher one stall, not one per
// message: the stall lasts until its writer has made no progress for
// frozenAfter, the reserve above its queue's pace mark takes the next
// messages, and later ones are dropped at once until its writer makes
// progress. In virtual time, twelve messages past the pace mark hold the
// publisher for exactly frozenAfter. (It used to be one stall per message
// for the whole stuckAfter window, which cut a healthy subscriber's rate
// by a third and raised its p99 6 to 8 times.)
func TestFrozenSubscriberCostsItsPublisherOneStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := pubAndSubQueue(t, 8) // a pace mark of 6 messages, a reserve of 2
		publish := publisher(b)
		publish()
		synctest.Wait() // the writer took it, and blocks: sub reads no more
		for range 6 {
			publish() // up to the pace mark
		}
		if s := b.Stats(); s.StreamStalls != 0 || s.Dropped != 0 {
			t.Fatalf("%d stalls, %d drops below the pace mark", s.StreamStalls, s.Dropped)
		}
		start := time.Now()
		for range 12 {
			publish()
		}
		if held := time.Since(start); held != frozenAfter {
			t.Fatalf("twelve messages for a frozen subscriber held the publisher %v, want one stall of %v", held, frozenAfter)
		}
		wantStalls(t, b, 1, 10) // and 2 in the reserve
	})
}

// A stall lasts until the writer has been idle for frozenAfter, and never
// less than streamStall: a queue that reached its pace mark long after
// its writer last wrote (but before stuckAfter) still gets that much.
func TestStallLastsAtLeastStreamStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := pubAndSubQueue(t, 8)
		publish := publisher(b)
		publish()
		synctest.Wait() // the writer took it, and blocks
		for range 6 {
			publish()
		}
		time.Sleep(frozenAfter + streamStall) // idle for longer than frozenAfter, not yet stuck
		start := time.Now()
		publish()
		if held := time.Since(start); held != streamStall {
			t.Fatalf("a stall for a writer idle past frozenAfter held the publisher %v, want %v", held, streamStall)
		}
		wantStalls(t, b, 1, 0) // into the reserve
	})
}

// A subscriber taken for frozen costs the reader one check per message
// for it: the frames the reader holds for the other subscribers still
// leave once per read, not once per message (a flush per message for a
// frozen subscriber made every healthy one a write per message and cut
// their rate by two thirds over TCP).
func TestFrozenSubscriberLeavesTheReadersBatchesWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, secret := pubAndSubQueue(t, 8)
		pc := b.dir.lookup("pub")
		ok := join(t, b, secret, "ok")
		t.Cleanup(func() { _ = ok.nc.Close() })
		subscribeRaw(t, ok, "ch")
		go func() { // ok reads everything
			for {
				if _, err := ok.r.ReadMessage(); err != nil {
					return
				}
			}
		}()
		var v hotpath.View
		stream := wire.New(wire.TypeStream, "ch").WithHeader(wire.HeaderID, "x").ToBytes()
		b.dispatch(pc, stream, &v)
		synctest.Wait()       // sub's writer took it, and blocks
		for range 6 + 2 + 1 { // to the mark, the reserve (the first after a stall), a drop
			b.dispatch(pc, stream, &v)
			synctest.Wait()
		}
		wantStalls(t, b, 1, 1)
		oc := b.dir.lookup("ok")
		var h held
		for range 5 {
			b.dispatchHeld(pc, stream, &v, &h)
		}
		if !slices.Contains(h.dests, &oc.endpoint) || h.flushes != 0 {
			t.Fatalf("the messages for the frozen subscriber flushed what the reader held for the others %d times", h.flushes)
		}
		h.flush()
		wantStalls(t, b, 1, 6)
	})
}

// A subscriber that stops reading for less than frozenAfter (a process
// not scheduled for a while on a busy machine) loses nothing: its
// publisher waits for it, past the pace mark, then goes on.
func TestPausedSubscriberLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, sub, _ := pubAndSubQueue(t, 8)
		publish := publisher(b)
		const n = 40
		got := make(chan int)
		go func() {
			time.Sleep(frozenAfter - time.Millisecond)
			i := 0
			for ; i < n; i++ {
				if _, err := sub.r.ReadMessage(); err != nil {
					break
				}
			}
			got <- i
		}()
		start := time.Now()
		for range n {
			publish()
		}
		if held := time.Since(start); held < frozenAfter-time.Millisecond {
			t.Fatalf("the publisher was held %v, less than the pause", held)
		}
		if i := <-got; i != n {
			t.Fatalf("the subscriber read %d of %d", i, n)
		}
		if s := b.Stats(); s.Dropped != 0 || s.StreamStalls == 0 {
			t.Fatalf("%d drops, %d stalls; want none dropped, and stalls", s.Dropped, s.StreamStalls)
		}
	})
}
