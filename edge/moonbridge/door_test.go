package moonbridge

// The door MoonBridge stands behind (busbar/edge): shared admission
// before REGISTERED, the rate-limited refusal log, and an accept loop
// that outlives running out of file descriptors. Each test drives the
// real listener over real TCP sockets.

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/edge"
	"busbar/edge/edgetest"
	"busbar/internal/testbroker"
)

// idleFlood is how many connections TestIdleConnectionsLeaveRegistrationsRoom
// opens and never registers: more than DefaultMaxConnections, which
// before the shared admission they could all but fill.
const idleFlood = 300

// While idleFlood connections that never send REGISTER are open, every
// legitimate registration succeeds: a connection that has not registered
// holds a place in the broker's login pool (its per-address share, with
// eviction of the oldest idle place), never one of MaxConnections.
//
// The broker runs without a grace for places (HandshakeGrace < 0), so
// that which place makes room is decided by the pool's order alone, not
// by how long ago the flood arrived: the grace is the broker's own
// concern, tested there.
func TestIdleConnectionsLeaveRegistrationsRoom(t *testing.T) {
	e := startWith(t, broker.Options{HandshakeGrace: -1}, nil, nil)
	// Each idle connection has been through admission once it has read
	// its HELLO, or been closed to make room or for lack of it.
	for range idleFlood {
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		_ = nc.SetDeadline(time.Now().Add(wait))
		if f, err := ReadFrame(nc); err == nil {
			if _, err := DecodeHello(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	const legitimate = 41
	for i := range legitimate {
		name := fmt.Sprintf("island-%d", i)
		if _, err := e.dial(registration(name, name, "primary"), secretA); err != nil {
			t.Fatalf("registration %d of %d beside %d idle connections: %v", i+1, legitimate, idleFlood, err)
		}
	}
}

// refusalsMade is how many refusals of one kind TestRefusalsAreRateLimited
// provokes.
const refusalsMade = 200

// Every refusal a peer can cause goes through the door's refusal log:
// however many, its reason writes at most RefusalBurst lines per
// RefusalInterval (and one per source address within that), and each
// refusal is counted once, written or not.
func TestRefusalsAreRateLimited(t *testing.T) {
	cases := []struct {
		name, line string
		mod        func(*Config)
		provoke    func(e *env)
	}{
		{"bad registration", "registration refused", nil, func(e *env) {
			if b, err := e.dial(registration("island-a", "island-a", "primary"), secretA+"x"); err == nil {
				e.t.Fatalf("registered with a wrong secret: %+v", b.reg)
			}
		}},
		{"over capacity", "at capacity", func(c *Config) { c.MaxConnections = 1 }, func(e *env) {
			if b, err := e.dial(registration("island-b", "island-b", "primary"), secretA); err == nil {
				e.t.Fatalf("registered past MaxConnections: %+v", b.reg)
			}
		}},
		{"handshake failed", "handshake failed", nil, func(e *env) {
			nc, err := net.Dial("tcp", e.addr)
			if err != nil {
				e.t.Fatal(err)
			}
			_ = nc.SetDeadline(time.Now().Add(wait))
			_, _ = ReadFrame(nc) // its HELLO; then it leaves without a REGISTER
			nc.Close()
		}},
		{"malformed frame", "malformed frame", nil, func(e *env) {
			b := e.register("island-a")
			b.write([]byte{7}) // no such frame type
			b.closedWithoutFrame()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := start(t, c.mod)
			if c.name == "over capacity" {
				e.register("island-a")
			}
			began := time.Now()
			for range refusalsMade {
				c.provoke(e)
			}
			// The server may log after the peer saw its connection end.
			testbroker.Eventually(t, wait, "every refusal counted", func() bool {
				written, suppressed := e.refusals.Counts()
				return written+suppressed >= refusalsMade
			})
			elapsed := time.Since(began)
			if written, suppressed := e.refusals.Counts(); written+suppressed != refusalsMade {
				t.Fatalf("%d written + %d suppressed, want %d refusals counted once each", written, suppressed, refusalsMade)
			}
			// Intervals begin at most once per RefusalInterval.
			bound := edge.RefusalBurst * int(elapsed/edge.RefusalInterval+1)
			if lines := strings.Count(e.log.String(), c.line); lines < 1 || lines > bound {
				t.Fatalf("%d lines with %q for %d refusals in %v; want 1..%d", lines, c.line, refusalsMade, elapsed, bound)
			}
		})
	}
}

// acceptFailures is how many EMFILE failures
// TestAcceptSurvivesTooManyOpenFiles injects.
const acceptFailures = 3

// Running out of file descriptors never stops the door: accept failures
// are retried after a pause, counted, and the next backend registers.
// (The test's cleanup checks that Serve returned only at Close.)
func TestAcceptSurvivesTooManyOpenFiles(t *testing.T) {
	before := edge.AcceptFailures()["moonbridge"]
	e := startWith(t, broker.Options{}, func(l net.Listener) net.Listener {
		return edgetest.EMFILE(l, acceptFailures)
	}, nil)
	b := e.register("island-a")
	b.write(EncodeEmpty(TypeHeartbeat))
	if v := b.next(); v != TypePong {
		t.Fatalf("heartbeat answered %#v", v)
	}
	if n := edge.AcceptFailures()["moonbridge"] - before; n < acceptFailures {
		t.Fatalf("%d accept failures counted, want at least %d", n, acceptFailures)
	}
	if !strings.Contains(e.log.String(), "accept failed") {
		t.Fatalf("the failures were not logged:\n%s", e.log.String())
	}
}

// stampTimeout writes the time left as whole milliseconds, at least
// MinTimeoutMillis and at most MaxTimeoutMillis, and touches no frame
// but a MESSAGE.
func TestStampTimeoutBounds(t *testing.T) {
	target := BackendEndpoint("island-a")
	m, err := EncodeMessage(MessageFrame{OperationID: 7, TimeoutMillis: MaxTimeoutMillis, Message: Message{ID: NewUUID(), Kind: KindEvent,
		Channel: "mb:x", Source: ProxyEndpoint(), Target: &target}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		left time.Duration
		want int64
	}{
		{time.Nanosecond, MinTimeoutMillis},
		{time.Millisecond - 1, MinTimeoutMillis},
		{time.Millisecond, 1},
		{1500*time.Millisecond + time.Microsecond, 1500},
		{MaxTimeoutMillis * time.Millisecond, MaxTimeoutMillis},
		{MaxTimeoutMillis*time.Millisecond + time.Millisecond, MaxTimeoutMillis},
	} {
		b, _ := AppendFrame(nil, m)
		stampTimeout(b, c.left)
		v, err := Decode(b[4:])
		if err != nil {
			t.Fatal(err)
		}
		if f := v.(MessageFrame); f.TimeoutMillis != c.want || f.OperationID != 7 {
			t.Fatalf("%v left: stamped %d ms (operation %d), want %d", c.left, f.TimeoutMillis, f.OperationID, c.want)
		}
	}
	pong, _ := AppendFrame(nil, EncodeEmpty(TypePong))
	before := string(pong)
	stampTimeout(pong, time.Second)
	if string(pong) != before {
		t.Fatal("stamped a PONG")
	}
}

// Without a shared admission (a Door with no Hold) the server keeps its
// own: MaxConnections connections before REGISTERED at once; one more
// is closed before its HELLO, and logged; a place is free again once
// one of them leaves, and a registered backend holds none.
func TestOwnAdmissionWithoutHold(t *testing.T) {
	const max = 2
	e := start(t, func(c *Config) { c.Door.Hold = nil; c.MaxConnections = max })
	var idle []net.Conn
	for range max {
		idle = append(idle, e.idle())
	}
	over, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetDeadline(time.Now().Add(wait))
	if f, err := ReadFrame(over); err == nil {
		t.Fatalf("connection %d of %d before REGISTERED got %x", max+1, max, f)
	}
	if !strings.Contains(e.log.String(), "too many logging in") {
		t.Fatalf("not logged:\n%s", e.log.String())
	}
	idle[0].Close()
	testbroker.Await(t, wait, "a free place", func() error {
		_, err := e.dial(registration("island-a", "island-a", "primary"), secretA)
		return err
	})
	e.register("island-b") // island-a's place was given back at REGISTERED
}
