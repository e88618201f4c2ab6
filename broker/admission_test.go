package broker_test

// What a peer that has not logged in can make the broker hold: a frame of
// at most MaxHelloBytes, and a place in a bounded pool of connections
// logging in, where of the places past their grace the one whose peer has
// sent the least of a hello makes room for a newcomer (the oldest of
// equals). Real sockets; admission_order_test.go has the order's edges in
// virtual time.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	return rawConnFrom(t, e, "")
}

// rawConnFrom is rawConn from the source address from (any address of
// 127.0.0.0/8 on Linux), which the broker counts it under; "" is the
// system's choice.
func rawConnFrom(t *testing.T, e *testbroker.Env, from string) (net.Conn, *wire.Reader) {
	t.Helper()
	ep, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	nc, err := d.Dial("tcp", ep.Address)
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
	_, err := dialClient(e, "second", noRetry)
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
	// The places' peers send nothing, so their idle grace is theirs too
	// (by default 50 ms, which a loaded machine spends before it tries).
	e := testbroker.Start(t, "tcp", broker.Options{MaxHandshakes: 2, HandshakeTimeout: time.Minute, HandshakeGrace: grace, HandshakeIdleGrace: grace})
	// Before the places are taken: no place is older than time.Since(start).
	start := time.Now()
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

// send writes b to nc.
func send(t *testing.T, nc net.Conn, b []byte) {
	t.Helper()
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// awaitProgress waits until the broker has read what the peers holding
// places in the network login pool sent: how much of a hello each has
// sent, oldest first, is want.
func awaitProgress(t *testing.T, e *testbroker.Env, want ...int64) {
	t.Helper()
	testbroker.Eventually(t, 10*time.Second, fmt.Sprintf("login progress %v", want), func() bool {
		return slices.Equal(broker.LoginProgress(e.Broker), want)
	})
}

// evictedWhileLoggingIn checks that the broker closed r's connection to
// make room, telling it why.
func evictedWhileLoggingIn(t *testing.T, r *wire.Reader, name string) {
	t.Helper()
	m, err := r.ReadMessage()
	if err != nil || m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultOverload) ||
		!strings.Contains(m.Value(wire.HeaderError), "closed while logging in") {
		t.Fatalf("%s: %v %v, want it closed while logging in", name, m, err)
	}
}

// helloAnswered checks that r's peer, which has sent its whole hello,
// still had its place: the hello is answered (AUTH: its secret is wrong).
func helloAnswered(t *testing.T, r *wire.Reader) {
	t.Helper()
	if m, err := r.ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != wire.CmdHello || m.Value(wire.HeaderResult) != string(wire.ResultAuth) {
		t.Fatalf("the hello: %v %v, want it answered AUTH", m, err)
	}
}

// A peer halfway through its hello keeps its place while a flood of idle
// connections churns through the pool around it, although it is the
// oldest: up to MaxHandshakes nothing is evicted; past it, each newcomer
// takes the place of the oldest idle peer. (The oldest place used to make
// room whatever its peer had sent.)
func TestIdlePeersAreEvictedBeforeOneHalfwayThroughItsHello(t *testing.T) {
	const pool = 4
	e := testbroker.Start(t, "tcp", broker.Options{MaxHandshakes: pool, MaxHandshakesPerAddr: pool, HandshakeTimeout: time.Minute, HandshakeGrace: -1})
	hello := helloOfSize(t, 400)
	halfway, halfwayR := rawConn(t, e)
	send(t, halfway, hello[:len(hello)/2])
	awaitProgress(t, e, int64(len(hello)/2))

	var idle []*wire.Reader
	for range pool - 1 {
		_, r := rawConn(t, e)
		idle = append(idle, r)
	}
	if n := e.Broker.Stats().HandshakesEvicted; n != 0 {
		t.Fatalf("%d evicted with the pool just full, want 0", n)
	}
	for i := range 3 * pool {
		_, r := rawConn(t, e) // read bus.info: admitted, and whoever made room was closed first
		idle = append(idle, r)
		if n := e.Broker.Stats().HandshakesEvicted; n != int64(i+1) {
			t.Fatalf("%d evicted after %d newcomers past the limit, want %d", n, i+1, i+1)
		}
	}
	for i, r := range idle[:len(idle)-(pool-1)] {
		evictedWhileLoggingIn(t, r, fmt.Sprintf("idle peer %d", i))
	}
	send(t, halfway, hello[len(hello)/2:])
	helloAnswered(t, halfwayR)
}

// Bytes that cannot be part of a hello earn no place: a peer that began a
// hello and then sent garbage counts as having sent nothing, and makes
// room before a peer halfway through its hello. The same holds within an
// address's share: there only the address's own places make room, the
// idle one first.
func TestGarbageBeforeLoginEarnsNoPlace(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{MaxHandshakes: 3, MaxHandshakesPerAddr: 2, HandshakeTimeout: time.Minute, HandshakeGrace: -1})
	hello := helloOfSize(t, 400)
	garbled, garbledR := rawConnFrom(t, e, "127.0.0.2")
	send(t, garbled, hello[:20])
	awaitProgress(t, e, 20)
	send(t, garbled, []byte("\x01\x02garbage"))
	awaitProgress(t, e, 0)
	halfway, halfwayR := rawConnFrom(t, e, "127.0.0.3")
	send(t, halfway, hello[:len(hello)/2])
	awaitProgress(t, e, 0, int64(len(hello)/2))
	_, idleR := rawConnFrom(t, e, "127.0.0.3") // the pool is full, and 127.0.0.3's share

	rawConnFrom(t, e, "127.0.0.4") // past the pool: the garbled peer, the oldest of those with nothing, makes room
	evictedWhileLoggingIn(t, garbledR, "the peer that sent garbage")
	rawConnFrom(t, e, "127.0.0.3") // past 127.0.0.3's share: its idle peer makes room, not the older halfway one
	evictedWhileLoggingIn(t, idleR, "the idle peer of a full share")
	if n := e.Broker.Stats().HandshakesEvicted; n != 2 {
		t.Fatalf("%d evicted, want 2", n)
	}
	send(t, halfway, hello[len(hello)/2:])
	helloAnswered(t, halfwayR)
}

// A flood from thousands of addresses across 127.0.0.0/8 (which any local
// user can bind, so no address's share ever fills), half of it idle and
// half slow (each has sent all of a hello but its last byte, and stops),
// runs while clients log in. No client is ever closed while logging in:
// each is admitted and logs in within its grace, or, when every place is
// younger than its grace, is refused up front ("retry") and admitted on a
// retry. The flood meanwhile churns through the pool and is refused.
func TestLoginFloodFromManyAddressesNeverEvictsPromptClients(t *testing.T) {
	const pool, clients, flooders = 16, 6, 2
	e := testbroker.Start(t, "tcp", broker.Options{MaxHandshakes: pool, MaxHandshakesPerAddr: 2, HandshakeTimeout: time.Minute})
	ep, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	slow := helloOfSize(t, 1000)
	slow = slow[:len(slow)-1]

	stop := make(chan struct{})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held []net.Conn // the flood's, closed at the end
		errs []error
	)
	for g := range flooders {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				from := net.IPv4(127, byte(1+g), byte(i/250%250), byte(1+i%250))
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
				nc, err := d.Dial("tcp", ep.Address)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if m, err := wire.NewReader(nc).ReadMessage(); err != nil || m.Value(wire.HeaderCommand) != wire.CmdInfo {
					nc.Close() // refused
					continue
				}
				if g%2 == 1 {
					_, _ = nc.Write(slow)
				}
				mu.Lock()
				held = append(held, nc)
				mu.Unlock()
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
		for _, nc := range held {
			nc.Close()
		}
		if len(errs) > 0 {
			t.Errorf("the flood could not dial: %v", errs[0])
		}
	}()
	// The flood has filled the pool, been refused, and churned through
	// it at least once (its places past their grace were evicted).
	testbroker.Eventually(t, 30*time.Second, "the flood churning through the pool", func() bool {
		s := e.Broker.Stats()
		return s.HandshakesRefused > 0 && s.HandshakesEvicted >= pool
	})

	retries := 0
	giveUp := time.Now().Add(time.Minute) // only a broken admission comes near it
	for i := range clients {
		for {
			c, err := dialClient(e, fmt.Sprintf("prompt-%d", i))
			if err == nil {
				t.Cleanup(func() { c.Close() })
				break
			}
			if strings.Contains(err.Error(), "closed while logging in") {
				t.Fatalf("prompt client %d was evicted by the flood: %v", i, err)
			}
			if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "retry") {
				t.Fatalf("prompt client %d: %v", i, err)
			}
			if retries++; time.Now().After(giveUp) {
				t.Fatalf("prompt client %d still refused after %d refusals", i, retries)
			}
		}
	}
	s := e.Broker.Stats()
	t.Logf("%d prompt clients logged in (%d refusals retried); the flood: %d evicted, %d refused", clients, retries, s.HandshakesEvicted, s.HandshakesRefused)
}
