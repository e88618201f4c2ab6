package moonbridge

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

// A registered backend is a busbar node named by its backend name; its
// epoch is busbar's, and the proxy epoch is the server's.
func TestRegister(t *testing.T) {
	e := start(t, nil)
	b := e.register("island-a")
	if b.reg.Epoch < 1 || b.reg.ProxyEpoch != e.srv.ProxyEpoch() {
		t.Fatalf("registered %+v, proxy epoch %s", b.reg, e.srv.ProxyEpoch())
	}
	alpha := e.node("alpha")
	e.inDirectory(alpha, "island-a", true)
	// The advertised game address is in the node's directory entry.
	nodes, err := alpha.Directory(ctxT(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Node == "island-a" && n.Advertised != "tcp://127.0.0.1:25565" {
			t.Fatalf("directory entry %+v", n)
		}
	}

	// HEARTBEAT is answered PONG.
	b.write(EncodeEmpty(TypeHeartbeat))
	if v := b.next(); v != TypePong {
		t.Fatalf("heartbeat answered %#v", v)
	}
	// GOODBYE ends the connection; the node leaves busbar.
	b.write(EncodeEmpty(TypeGoodbye))
	b.closedWithoutFrame()
	e.inDirectory(alpha, "island-a", false)
}

// Each refusal closes the connection without a frame, the way
// MoonBridge's proxy refuses, and is logged once with its reason and
// never the secret. (Each case has a server of its own: the refusal log
// writes one line per source address and interval, and every case comes
// from 127.0.0.1.)
func TestRegistrationRefusals(t *testing.T) {
	good := func() Register { return registration("island-a", "i-a", "primary") }
	const proxy = "island-proxy" // a name the key may claim but for being the proxy's
	cases := []struct {
		name   string
		reg    func() Register
		secret string
		reason error
	}{
		{"wrong HMAC", good, secretA + "x", ErrBadSignature},
		{"unknown key id", func() Register { r := good(); r.KeyID = "nope"; return r }, secretA, ErrUnknownKey},
		{"name the principal may not claim", func() Register { r := good(); r.Name = "castle"; return r }, secretA, ErrNameNotAllowed},
		{"name busbar cannot carry", func() Register { r := good(); r.Name = "Island_A"; return r }, secretA, ErrNameNotAllowed},
		{"the proxy's name", func() Register { r := good(); r.Name = proxy; return r }, secretA, ErrNameNotAllowed},
		{"address not allowed", func() Register { r := good(); r.Address = "tcp://10.0.0.1:25565"; return r }, secretA, ErrAddress},
		{"address without host", func() Register { r := good(); r.Address = "island"; return r }, secretA, ErrAddress},
		{"generation not a UUID", func() Register { r := good(); r.Generation = "gen-1"; return r }, secretA, ErrVersion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := start(t, func(c *Config) { c.AllowHosts = []string{"127.0.0.1"}; c.ProxyNode = proxy })
			b, err := e.dial(c.reg(), c.secret)
			if err == nil {
				t.Fatalf("registered: %+v", b.reg)
			}
			if got := strings.Count(e.log.String(), "registration refused"); got != 1 {
				t.Fatalf("logged %d times", got)
			}
			if !strings.Contains(e.log.String(), c.reason.Error()) {
				t.Fatalf("log lacks %q:\n%s", c.reason, e.log.String())
			}
			if strings.Contains(e.log.String(), secretA) {
				t.Fatal("the secret was logged")
			}
		})
	}
}

// A second live instance of a backend name is refused; the same instance
// registering again takes over from its older connection, which busbar's
// node follows (a new epoch).
func TestSecondInstance(t *testing.T) {
	e := start(t, nil)
	first := e.register("island-a")
	if _, err := e.dial(registration("island-a", "other-instance", "primary"), secretA); err == nil {
		t.Fatal("a second instance registered")
	}
	if !strings.Contains(e.log.String(), ErrDuplicate.Error()) {
		t.Fatalf("log: %s", e.log.String())
	}
	again := e.register("island-a")
	if again.reg.Epoch <= first.reg.Epoch {
		t.Fatalf("epoch %d after %d", again.reg.Epoch, first.reg.Epoch)
	}
	first.closedWithoutFrame()
	again.write(EncodeEmpty(TypeHeartbeat))
	if v := again.next(); v != TypePong {
		t.Fatalf("heartbeat answered %#v", v)
	}
}

// A frame a backend may not send, or a malformed one, ends its
// connection.
func TestBadFrameEndsSession(t *testing.T) {
	e := start(t, nil)
	for name, frame := range map[string][]byte{
		"hello from a backend": EncodeHello(Hello{Version: Version}),
		"pong from a backend":  EncodeEmpty(TypePong),
		"unknown type":         {7},
		"malformed message":    {TypeMessage, 0},
	} {
		t.Run(name, func(t *testing.T) {
			b := e.register("island-a")
			b.write(frame)
			b.closedWithoutFrame()
		})
	}
}

// Close says GOODBYE to registered backends and ends every connection.
func TestCloseSaysGoodbye(t *testing.T) {
	e := start(t, nil)
	b := e.register("island-a")
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if v := b.next(); v != TypeGoodbye {
		t.Fatalf("got %#v, want GOODBYE", v)
	}
	b.closedWithoutFrame()
	if nc, err := net.Dial("tcp", e.addr); err == nil {
		nc.Close()
		t.Fatal("the listener still accepts after Close")
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal("a second Close:", err)
	}
	if err := e.srv.ServeConn(nil); !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
}

// A connection that never registers is closed at the handshake timeout;
// one that registers in time is served.
func TestHandshakeTimeout(t *testing.T) {
	e := start(t, func(c *Config) { c.HandshakeTimeout = 200 * time.Millisecond })
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(wait))
	b := &backend{t: t, nc: nc, r: bufio.NewReader(nc), name: "silent"}
	if _, err := DecodeHello(must1[[]byte](t)(ReadFrame(b.r))); err != nil {
		t.Fatal(err)
	}
	b.closedWithoutFrame()
	e.register("island-a")
}

// A registered backend silent for its lease is disconnected, and its
// node leaves busbar; one that sends a HEARTBEAT is answered.
func TestLease(t *testing.T) {
	e := start(t, func(c *Config) { c.Lease = 300 * time.Millisecond })
	b := e.register("island-a")
	b.write(EncodeEmpty(TypeHeartbeat))
	if v := b.next(); v != TypePong {
		t.Fatalf("heartbeat: %#v", v)
	}
	b.closedWithoutFrame()
	e.inDirectory(e.node("alpha"), "island-a", false)
	if !strings.Contains(e.log.String(), "timeout") {
		t.Fatalf("the lease's end is not logged:\n%s", e.log.String())
	}
}

// MaxConnections registered backends are served; one more registration
// is refused (closed without a frame) and logged, and a slot is free
// again once a backend leaves. Connections that have not registered take
// no slot: two idle ones are open all along.
func TestMaxConnections(t *testing.T) {
	const max = 2
	e := start(t, func(c *Config) { c.MaxConnections = max })
	for range max {
		e.idle()
	}
	a := e.register("island-a")
	e.register("island-b")
	if b, err := e.dial(registration("island-c", "island-c", "primary"), secretA); err == nil {
		t.Fatalf("registration %d of %d: %+v", max+1, max, b.reg)
	}
	if !strings.Contains(e.log.String(), "at capacity") {
		t.Fatalf("not logged:\n%s", e.log.String())
	}
	a.write(EncodeEmpty(TypeGoodbye))
	a.closedWithoutFrame()
	testbroker.Await(t, wait, "a free slot", func() error {
		_, err := e.dial(registration("island-c", "island-c", "primary"), secretA)
		return err
	})
}

// idle opens a connection that reads its HELLO and never registers; it
// stays open until the test ends (or the server closes it).
func (e *env) idle() net.Conn {
	e.t.Helper()
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(wait))
	if _, err := DecodeHello(must1[[]byte](e.t)(ReadFrame(nc))); err != nil {
		e.t.Fatal(err)
	}
	return nc
}

func must1[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
