package broker

// The order in which the login pool takes places back, in virtual time
// (testing/synctest) over in-memory pipes, so that the grace's edges are
// exact: a place within its grace is never taken; of those past it, the
// one whose peer has sent the least of a hello, the oldest of equals.
// And helloScan, which measures how much of a hello a peer has sent.
// admission_test.go drives the same over real TCP sockets.

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"busbar/wire"
)

// helloBytes is a hello frame as a client sends it, prefix included.
func helloBytes(t testing.TB, principal string) []byte {
	t.Helper()
	body, _ := json.Marshal(wire.Hello{Node: "n", Principal: principal, Secret: "s"})
	f, err := wire.AppendFrame(nil, wire.New(wire.TypeRequest, wire.CmdHello).
		WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The progress of a stream is the count of its bytes that can begin a
// hello, fed in any pieces; the whole frame ranks above any part of one;
// a byte that cannot be part of a hello makes it 0 for good.
func TestHelloScanCountsOnlyTheStartOfAHello(t *testing.T) {
	hello := helloBytes(t, strings.Repeat("p", 300))
	var whole helloScan
	if got := whole.feed(hello); got != helloRead {
		t.Fatalf("a whole hello in one piece: %d, want helloRead", got)
	}
	if helloRead <= prefixLen+MaxHelloBytes-1 {
		t.Fatal("helloRead does not rank above the largest part of a hello")
	}
	var bytewise helloScan
	for i := range hello {
		got, want := bytewise.feed(hello[i:i+1]), int64(i+1)
		if i == len(hello)-1 {
			want = helloRead
		}
		if got != want {
			t.Fatalf("after %d bytes fed one by one: %d, want %d", i+1, got, want)
		}
	}
	// A byte no hello has, anywhere after the length prefix: nothing
	// counts, then or later.
	for i := prefixLen; i < len(hello); i++ {
		bad := append([]byte(nil), hello...)
		bad[i] = 0x01
		var s helloScan
		if got := s.feed(bad[:i+1]); got != 0 {
			t.Fatalf("a control byte at %d (%q): %d, want 0", i, hello[max(0, i-8):i+1], got)
		}
		if got := s.feed(bad[i+1:]); got != 0 {
			t.Fatalf("the rest after a control byte at %d: %d, want 0", i, got)
		}
	}
	// The length prefix: up to MaxHelloBytes and at least a "---\n---"
	// frame counts; past either, nothing.
	for _, c := range []struct {
		size uint32
		want int64
	}{{MaxHelloBytes, prefixLen}, {MaxHelloBytes + 1, 0}, {7, prefixLen}, {6, 0}, {1 << 20, 0}, {1 << 30, 0}} {
		var s helloScan
		p := []byte{byte(c.size >> 24), byte(c.size >> 16), byte(c.size >> 8), byte(c.size)}
		if got := s.feed(p); got != c.want {
			t.Errorf("a %d-byte length prefix: %d, want %d", c.size, got, c.want)
		}
	}
	// What other protocols send first is nothing.
	for _, other := range []string{"GET / HTTP/1.1\r\n", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "\x00\x00\x00\x20garbage garbage garbage garbage!"} {
		var s helloScan
		if got := s.feed([]byte(other)); got != 0 {
			t.Errorf("%q: %d, want 0", other, got)
		}
	}
}

// pipePeer is a peer on an in-memory pipe that the test drives by hand.
type pipePeer struct {
	cl net.Conn
	r  *wire.Reader
}

// dialPipe serves a pipe as a network peer of b (its address is "pipe")
// and returns the peer and the first frame the broker sent it: bus.info
// when it got a place, a bus.error when it was refused.
func dialPipe(t *testing.T, b *Broker) (*pipePeer, *wire.Message) {
	t.Helper()
	cl, srv := net.Pipe()
	go b.ServeConn(srv)
	p := &pipePeer{cl: cl, r: wire.NewReader(cl)}
	t.Cleanup(func() { cl.Close() })
	m, err := p.r.ReadMessage()
	if err != nil {
		t.Fatalf("a newcomer read %v", err)
	}
	return p, m
}

// admitted is a newcomer that got a place; sent, if any, is written (and
// read by the broker before admitted returns).
func admitted(t *testing.T, b *Broker, sent []byte) *pipePeer {
	t.Helper()
	p, m := dialPipe(t, b)
	if m.Value(wire.HeaderCommand) != wire.CmdInfo {
		t.Fatalf("a newcomer was not admitted: %v", m)
	}
	if _, err := p.cl.Write(sent); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return p
}

// refused checks that a newcomer is refused, told to retry.
func refused(t *testing.T, b *Broker) {
	t.Helper()
	_, m := dialPipe(t, b)
	if m.Value(wire.HeaderResult) != string(wire.ResultOverload) || !strings.Contains(m.Value(wire.HeaderError), "retry") ||
		strings.Contains(m.Value(wire.HeaderError), "closed while logging in") {
		t.Fatalf("a newcomer read %v, want a refusal", m)
	}
}

// evicted checks that p's place was taken back, p told why.
func (p *pipePeer) evicted(t *testing.T, name string) {
	t.Helper()
	m, err := p.r.ReadMessage()
	if err != nil || m.Value(wire.HeaderResult) != string(wire.ResultOverload) || !strings.Contains(m.Value(wire.HeaderError), "closed while logging in") {
		t.Fatalf("%s: %v %v, want it evicted", name, m, err)
	}
}

// A full pool takes back no place within its grace: a newcomer is refused
// up to the last nanosecond of the oldest's grace. From then on, each
// newcomer takes the place of the peer that has sent the least of a
// hello, the oldest of equals: the idle first, in the order they came,
// then the partial hellos from the shortest, however old. Once every
// place left is within its grace again, newcomers are refused.
func TestLoginPoolTakesBackTheLeastProgressPastItsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = time.Second
		b, _ := newTestBroker(t, Options{MaxHandshakes: 5, MaxHandshakesPerAddr: 5, HandshakeTimeout: time.Hour, HandshakeGrace: grace, HandshakeIdleGrace: -1})
		hello := helloBytes(t, "p")
		most := admitted(t, b, hello[:len(hello)-1])
		less := admitted(t, b, hello[:len(hello)/2])
		lessToo := admitted(t, b, hello[:len(hello)/2]) // as much as less, and younger
		idle := admitted(t, b, nil)
		idleToo := admitted(t, b, nil)

		refused(t, b)
		time.Sleep(grace - time.Nanosecond) // virtual time: the grace's last instant
		refused(t, b)
		if s := b.Stats(); s.HandshakesRefused != 2 || s.HandshakesEvicted != 0 {
			t.Fatalf("within the grace: refused %d, evicted %d; want 2 and 0", s.HandshakesRefused, s.HandshakesEvicted)
		}
		time.Sleep(time.Nanosecond) // virtual time: the grace is over
		for i, p := range []*pipePeer{idle, idleToo, less, lessToo, most} {
			admitted(t, b, nil)
			p.evicted(t, []string{"idle", "idleToo", "less", "lessToo", "most"}[i])
		}
		refused(t, b) // every place is a newcomer's, within its grace
		if s := b.Stats(); s.HandshakesRefused != 3 || s.HandshakesEvicted != 5 {
			t.Fatalf("refused %d, evicted %d; want 3 and 5", s.HandshakesRefused, s.HandshakesEvicted)
		}
		for _, p := range []*pipePeer{most, less, lessToo, idle, idleToo} {
			p.cl.Close()
		}
		closeAllPipes(t, b)
	})
}

// An address's share is taken back in the same order, among that
// address's places only: its idle peer makes room before its older peer
// halfway through a hello, which makes room next, being past its grace;
// then the share is all newcomers, and the next is refused.
func TestAddressShareTakesBackItsLeastProgressFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = time.Second
		b, _ := newTestBroker(t, Options{MaxHandshakes: 8, MaxHandshakesPerAddr: 2, HandshakeTimeout: time.Hour, HandshakeGrace: grace, HandshakeIdleGrace: -1})
		hello := helloBytes(t, "p")
		half := admitted(t, b, hello[:len(hello)/2])
		idle := admitted(t, b, nil)
		refused(t, b) // the share is full, and within its grace
		time.Sleep(grace)
		admitted(t, b, nil)
		idle.evicted(t, "idle")
		admitted(t, b, nil)
		half.evicted(t, "half")
		refused(t, b)
		if s := b.Stats(); s.HandshakesRefused != 2 || s.HandshakesEvicted != 2 {
			t.Fatalf("refused %d, evicted %d; want 2 and 2", s.HandshakesRefused, s.HandshakesEvicted)
		}
		closeAllPipes(t, b)
	})
}

// A place whose peer has sent nothing of a hello for the idle grace is
// taken back then, not after the whole grace: nothing at all (idle) or
// nothing after a part of one (stalled). A peer still sending keeps its
// place: the idle grace counts from its last byte.
func TestIdleAndStalledPlacesAreTakenBackAfterTheIdleGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace, idleGrace = time.Second, 50 * time.Millisecond
		b, _ := newTestBroker(t, Options{MaxHandshakes: 3, MaxHandshakesPerAddr: 3, HandshakeTimeout: time.Hour, HandshakeGrace: grace})
		if b.opts.HandshakeIdleGrace != DefaultHandshakeIdleGrace || DefaultHandshakeIdleGrace != idleGrace {
			t.Fatalf("idle grace %v by default", b.opts.HandshakeIdleGrace)
		}
		hello := helloBytes(t, "p")
		stalled := admitted(t, b, hello[:len(hello)/2])
		sending := admitted(t, b, hello[:10])
		idle := admitted(t, b, nil)
		time.Sleep(idleGrace / 2) // virtual time
		if _, err := sending.cl.Write(hello[10:20]); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(idleGrace/2 - time.Nanosecond)
		refused(t, b) // the idle grace's last instant
		time.Sleep(time.Nanosecond)
		admitted(t, b, nil)
		idle.evicted(t, "idle")
		admitted(t, b, nil)
		stalled.evicted(t, "stalled")
		refused(t, b) // sending sent a byte idleGrace/2 ago; the rest are newcomers
		time.Sleep(idleGrace / 2)
		admitted(t, b, nil)
		sending.evicted(t, "sending, stalled since")
		if s := b.Stats(); s.HandshakesRefused != 2 || s.HandshakesEvicted != 3 {
			t.Fatalf("refused %d, evicted %d; want 2 and 3", s.HandshakesRefused, s.HandshakesEvicted)
		}
		closeAllPipes(t, b)
	})
}

// closeAllPipes shuts b down; the test's pipes close at its cleanup.
func closeAllPipes(t *testing.T, b *Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
