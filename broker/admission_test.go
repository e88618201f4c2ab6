package broker_test

// What a peer that has not logged in can make the broker hold: a frame of
// at most MaxHelloBytes, and a place in a bounded pool of connections
// logging in, where the oldest makes room for a newcomer. Real sockets.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// rawConn dials e's endpoint over TCP and reads the broker's bus.info.
func rawConn(t *testing.T, e *testbroker.Env) (net.Conn, *wire.Reader) {
	t.Helper()
	ep, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", ep.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	r := wire.NewReader(nc)
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != wire.CmdInfo {
		t.Fatalf("bus.info: %v %v", m, err)
	}
	return nc, r
}

// helloOfSize is a hello frame (prefix included) whose text form is n bytes.
func helloOfSize(t *testing.T, n int) []byte {
	t.Helper()
	frame := func(pad int) []byte {
		body, _ := json.Marshal(wire.Hello{Node: "n", Principal: strings.Repeat("p", pad), Secret: "s"})
		f, err := wire.AppendFrame(nil, wire.New(wire.TypeRequest, wire.CmdHello).
			WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderID, "h").WithBody(body))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := len(frame(1)) - 4 - 1 // principal is omitted when empty
	f := frame(n - base)
	if got := binary.BigEndian.Uint32(f); int(got) != n {
		t.Fatalf("built a %d-byte hello, want %d", got, n)
	}
	return f
}

// A hello of MaxHelloBytes is read and answered; one byte more, or a
// frame that claims a megabyte, is answered TOO_LARGE before any of it is
// read, and the connection closes. (Before login the limit used to be the
// full payload limit: 1,000 such peers made the broker hold 1.33 GB.)
func TestFramesBeforeLoginAreBoundedByMaxHelloBytes(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	nc, r := rawConn(t, e)
	if _, err := nc.Write(helloOfSize(t, broker.MaxHelloBytes)); err != nil {
		t.Fatal(err)
	}
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != wire.CmdHello || m.Value(wire.HeaderResult) != string(wire.ResultAuth) {
		t.Fatalf("a hello at the limit: %v %v (want it read, and refused for its credential)", m, err)
	}
	for _, claim := range []int{broker.MaxHelloBytes + 1, 1 << 20} {
		nc, r := rawConn(t, e)
		var prefix [4]byte
		binary.BigEndian.PutUint32(prefix[:], uint32(claim))
		if _, err := nc.Write(prefix[:]); err != nil { // and nothing more: the broker must not wait for it
			t.Fatal(err)
		}
		m, err := r.ReadMessage()
		if err != nil || m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) ||
			!strings.Contains(m.Value(wire.HeaderError), fmt.Sprint(broker.MaxHelloBytes)) {
			t.Fatalf("a %d-byte frame before login: %v %v", claim, m, err)
		}
		if _, err := r.ReadMessage(); !errors.Is(err, io.EOF) {
			t.Fatalf("after TOO_LARGE the connection gave %v, want EOF", err)
		}
	}
}

// A flood of TCP connections that never log in holds at most
// MaxHandshakesPerAddr places: the oldest are closed, told why, to make
// room, so a client that says hello at once gets in over TCP, and a client
// on the Unix socket (its own pool) is never touched. (The flood used to
// hold every connection slot for the whole HandshakeTimeout, refusing even
// the Unix socket.)
func TestIdleLoginFloodNeverLocksOutPromptClients(t *testing.T) {
	const perAddr, flood = 4, 20
	e := testbroker.Start(t, "tcp", broker.Options{
		MaxConnections: flood, MaxHandshakes: 8, MaxHandshakesPerAddr: perAddr, HandshakeTimeout: time.Minute, HandshakeGrace: -1,
	})
	sock := filepath.Join(e.Dir, "local.sock")
	ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: sock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Broker.Serve(ln) }()

	readers := make([]*wire.Reader, flood)
	for i := range readers {
		_, readers[i] = rawConn(t, e) // admitted: it has read bus.info
	}
	// All but the newest perAddr were closed while logging in, each told why.
	for i, r := range readers[:flood-perAddr] {
		m, err := r.ReadMessage()
		if err != nil || m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultOverload) ||
			!strings.Contains(m.Value(wire.HeaderError), "logging in") {
			t.Fatalf("idle connection %d: %v %v", i, m, err)
		}
	}
	if n := e.Broker.Stats().HandshakesEvicted; n != flood-perAddr {
		t.Fatalf("%d connections evicted, want %d", n, flood-perAddr)
	}
	// The slots of the evicted are free again: a prompt client gets in over
	// TCP (evicting one more idle peer), and one on the Unix socket too.
	testbroker.Eventually(t, 5*time.Second, "evicted connections released", func() bool { return e.Broker.Stats().HandshakesEvicted == flood-perAddr })
	if c, err := dialClient(e, "prompt-tcp"); err != nil {
		t.Fatalf("a prompt TCP client during the flood: %v", err)
	} else {
		t.Cleanup(func() { c.Close() })
	}
	if c, err := dialClient(e, "prompt-unix", func(o *client.Options) { o.Server = "unix://" + sock }); err != nil {
		t.Fatalf("a Unix client during the flood: %v", err)
	} else {
		t.Cleanup(func() { c.Close() })
	}
	if n := e.Broker.Stats().HandshakesEvicted; n != flood-perAddr+1 {
		t.Fatalf("%d evicted after two logins, want %d (only the TCP login evicts)", n, flood-perAddr+1)
	}
}

// A client the broker will not serve is told why: over MaxConnections it
// gets a bus.error naming the limit, which the client returns as
// ErrRefused, instead of a bare end of stream.
func TestOverCapacityConnectionIsToldWhy(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{MaxConnections: 1})
	connect(t, e, "first")
	_, err := dialClient(e, "second")
	if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "limit of 1 connections") {
		t.Fatalf("connect past MaxConnections: %v", err)
	}
}

// closedByPeer reports whether the broker closed the other end of c: a read
// returns an error other than a timeout.
func closedByPeer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// tcpPair is a real loopback TCP connection from the given source address:
// the broker's end (what another listener of the process accepted) and
// the peer's.
func tcpPair(t *testing.T, ln net.Listener, from string) (server, peer net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	peer, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close(); server.Close() })
	return server, peer
}

// Connections of another listener that have not authenticated (serve's
// HTTP listener) hold places in the same pool as the bus's connections
// logging in: up to MaxHandshakes in all and MaxHandshakesPerAddr per
// address nothing is closed; one more closes the oldest, at once, and
// counts it.
func TestHeldLoginPlacesShareThePool(t *testing.T) {
	const pool, perAddr = 4, 2
	e := testbroker.Start(t, "tcp", broker.Options{MaxHandshakes: pool, MaxHandshakesPerAddr: perAddr, HandshakeTimeout: time.Minute, HandshakeGrace: -1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// Per address: two from 127.0.0.2 fit, a third closes the first.
	var peers []net.Conn
	var releases []func()
	for range perAddr {
		srv, peer := tcpPair(t, ln, "127.0.0.2")
		releases = append(releases, e.Broker.HoldLoginPlace(srv))
		peers = append(peers, peer)
	}
	if closedByPeer(peers[0], 20*time.Millisecond) || e.Broker.Stats().HandshakesEvicted != 0 {
		t.Fatal("a place within the address's share was taken back")
	}
	srv, peer := tcpPair(t, ln, "127.0.0.2")
	releases = append(releases, e.Broker.HoldLoginPlace(srv))
	peers = append(peers, peer)
	if !closedByPeer(peers[0], 5*time.Second) || e.Broker.Stats().HandshakesEvicted != 1 {
		t.Fatal("the oldest of an address past its share was not closed")
	}

	// In all: two more from 127.0.0.3 fill the pool; a fifth place closes
	// the oldest still held (peers[1]); a bus connection logging in is one
	// of the pool too and closes the next (peers[2]).
	for range 2 {
		srv, peer := tcpPair(t, ln, "127.0.0.3")
		releases = append(releases, e.Broker.HoldLoginPlace(srv))
		peers = append(peers, peer)
	}
	if closedByPeer(peers[1], 20*time.Millisecond) || e.Broker.Stats().HandshakesEvicted != 1 {
		t.Fatal("a place within the pool was taken back")
	}
	srv, peer = tcpPair(t, ln, "127.0.0.4")
	releases = append(releases, e.Broker.HoldLoginPlace(srv))
	peers = append(peers, peer)
	if !closedByPeer(peers[1], 5*time.Second) || e.Broker.Stats().HandshakesEvicted != 2 {
		t.Fatal("the oldest place was not closed when the pool was full")
	}
	rawConn(t, e) // logging in on the bus
	if !closedByPeer(peers[2], 5*time.Second) || e.Broker.Stats().HandshakesEvicted != 3 {
		t.Fatal("a bus login did not take the oldest held place")
	}

	// A released place is free: releasing twice, or after an eviction,
	// changes nothing else.
	for _, release := range releases {
		release()
		release()
	}
	for i := range pool - 1 { // the bus connection above still holds one
		srv, _ := tcpPair(t, ln, fmt.Sprintf("127.0.0.%d", 5+i))
		defer e.Broker.HoldLoginPlace(srv)()
	}
	if n := e.Broker.Stats().HandshakesEvicted; n != 3 {
		t.Fatalf("%d evictions after the places were released, want 3", n)
	}
}

// A connection logging in keeps its place for HandshakeGrace whatever
// comes after it: a newcomer that finds every place it could take younger
// than that is refused, told why, and counted; once the oldest is past
// its grace, a newcomer takes its place again.
func TestLoginPlacesAreKeptForTheirGrace(t *testing.T) {
	const grace = 300 * time.Millisecond
	e := testbroker.Start(t, "tcp", broker.Options{MaxHandshakes: 2, HandshakeTimeout: time.Minute, HandshakeGrace: grace})
	_, firstR := rawConn(t, e)
	rawConn(t, e)
	ep, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	// tryLogin dials and reports whether it got a place (bus.info) or
	// was refused, told why.
	tryLogin := func() bool {
		nc, err := net.Dial("tcp", ep.Address)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		m, err := wire.NewReader(nc).ReadMessage()
		if err != nil {
			t.Fatalf("a newcomer read %v", err)
		}
		if m.Value(wire.HeaderCommand) == wire.CmdInfo {
			return true
		}
		if m.Value(wire.HeaderResult) != string(wire.ResultOverload) || !strings.Contains(m.Value(wire.HeaderError), "retry") {
			t.Fatalf("a refused newcomer read %v", m)
		}
		return false
	}
	start := time.Now()
	if tryLogin() {
		if time.Since(start) < grace {
			t.Fatal("a newcomer evicted a place within its grace")
		}
		t.Skip("the machine took longer than the grace to get here")
	}
	if s := e.Broker.Stats(); s.HandshakesRefused != 1 || s.HandshakesEvicted != 0 {
		t.Fatalf("refused %d, evicted %d; want 1 and 0", s.HandshakesRefused, s.HandshakesEvicted)
	}
	testbroker.Eventually(t, 10*time.Second, "a newcomer admitted once the oldest is past its grace", tryLogin)
	if m, err := firstR.ReadMessage(); err != nil || m.Value(wire.HeaderResult) != string(wire.ResultOverload) {
		t.Fatalf("the oldest, evicted: %v %v", m, err)
	}
}
