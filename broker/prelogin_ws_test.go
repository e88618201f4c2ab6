package broker_test

// WebSocket peers that never log in: dropped at once when evicted or
// timed out (no close handshake to wait out), and network peers of any
// kind never take the connections kept for local ones.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/transport"
	"busbar/wire"
)

// closeHandshakeWait is the WebSocket library's wait for a peer's close
// frame: a connection the broker closes with a handshake stays open this
// long for a peer that never answers.
const closeHandshakeWait = 5 * time.Second

// wsIdle upgrades a raw TCP connection to e's /bus and returns it: a peer
// that never reads a frame of its own accord, never answers a close, and
// never logs in.
func wsIdle(t *testing.T, e *testbroker.Env) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, br, err := wsUpgrade(t, e)
	if err != nil {
		t.Fatal(err)
	}
	return nc, br
}

// wsUpgrade is wsIdle, with an error when the broker did not send
// bus.info (it refused the connection).
func wsUpgrade(t *testing.T, e *testbroker.Env) (net.Conn, *bufio.Reader, error) {
	t.Helper()
	ep, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", ep.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	req := "GET /bus HTTP/1.1\r\nHost: busbar\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	// bus.info: the broker has counted it among the connections logging in.
	var seen []byte
	for !strings.Contains(string(seen), wire.CmdInfo) {
		b, err := br.ReadByte()
		if err != nil {
			return nc, br, fmt.Errorf("waiting for bus.info: %v (read %q)", err, seen)
		}
		seen = append(seen, b)
	}
	return nc, br, nil
}

// droppedBefore reports whether the broker closed nc's TCP connection
// within wait, reading (and discarding) what it sent first.
func droppedBefore(nc net.Conn, br *bufio.Reader, wait time.Duration) (string, bool) {
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(br)
	var ne net.Error
	return string(b), err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

func TestPreLoginWebSocketIsDroppedAtOnceWhenEvicted(t *testing.T) {
	e := testbroker.Start(t, "ws", broker.Options{MaxHandshakes: 2, MaxConnections: 3, LocalReserve: -1, HandshakeTimeout: time.Minute, HandshakeGrace: -1})
	a, abr := wsIdle(t, e)
	wsIdle(t, e)
	wsIdle(t, e) // the pool is full: a makes room
	// a is told why and dropped well before a close handshake would have
	// given up waiting for it.
	got, dropped := droppedBefore(a, abr, closeHandshakeWait*4/5)
	if !dropped {
		t.Fatal("an evicted WebSocket stayed open, waiting for a close handshake")
	}
	if !strings.Contains(got, "closed while logging in") {
		t.Fatalf("the evicted peer read %q, want the reason", got)
	}
	// Its connection is no longer served: a new peer gets a place of
	// MaxConnections (3) where a held one would be refused.
	testbroker.Eventually(t, closeHandshakeWait*4/5, "the evicted connection's place freed", func() bool {
		nc, _, err := wsUpgrade(t, e)
		nc.Close()
		return err == nil
	})
}

func TestPreLoginWebSocketIsDroppedAtOnceWhenItTimesOut(t *testing.T) {
	e := testbroker.Start(t, "ws", broker.Options{HandshakeTimeout: 100 * time.Millisecond})
	nc, br := wsIdle(t, e)
	got, dropped := droppedBefore(nc, br, closeHandshakeWait*4/5)
	if !dropped {
		t.Fatal("a WebSocket that timed out logging in stayed open, waiting for a close handshake")
	}
	if !strings.Contains(got, string(wire.ResultTimeout)) {
		t.Fatalf("the peer read %q, want TIMEOUT", got)
	}
}

// Network peers are refused at MaxConnections - LocalReserve; the rest
// are for the owner's processes on the Unix socket, up to MaxConnections.
func TestNetworkPeersNeverTakeTheLocalReserve(t *testing.T) {
	const maxConns, reserve = 6, 2
	e := testbroker.Start(t, "tcp", broker.Options{MaxConnections: maxConns, LocalReserve: reserve, HandshakeTimeout: time.Minute})
	sock := filepath.Join(e.Dir, "local.sock")
	ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: sock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Broker.Serve(ln) }()

	for range maxConns - reserve {
		rawConn(t, e) // admitted: it read bus.info
	}
	// One more network peer is refused, told why.
	if _, err := dialClient(e, "one-too-many", noRetry); !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "kept for local peers") {
		t.Fatalf("a network peer past MaxConnections - LocalReserve: %v", err)
	}
	// The owner's processes get the reserve, and no more.
	local := func(o *client.Options) { o.Server = "unix://" + sock }
	for i := range reserve {
		c, err := dialClient(e, "local-"+string(rune('a'+i)), local)
		if err != nil {
			t.Fatalf("local peer %d of the reserve: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
	}
	if _, err := dialClient(e, "local-past", local, noRetry); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("a local peer past MaxConnections: %v", err)
	}
	if n := e.Broker.Stats().OverCapacity; n != 2 {
		t.Fatalf("%d refused at capacity, want 2", n)
	}
}
