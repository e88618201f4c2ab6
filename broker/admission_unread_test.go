//go:build unix

package broker

import (
	"net"
	"testing"
	"time"
)

// tcpPair is a real TCP connection: the peer's end and the broker's,
// which nothing reads.
func tcpPair(t *testing.T) (peer, srv net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close(); srv.Close() })
	return peer, srv
}

// waitUnread waits until n bytes the peer wrote wait unread on srv.
func waitUnread(t *testing.T, srv net.Conn, n int) {
	t.Helper()
	buf := make([]byte, prefixLen+MaxHelloBytes)
	deadline := time.Now().Add(time.Minute)
	for peekConn(srv, buf) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes written never arrived", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A prompt client whose whole hello waits in its socket, unread by a busy
// broker, ranks above a peer that has dripped part of a hello: the
// dripper makes room first. Garbage waiting unread earns nothing, and an
// HTTP place, with no hello to measure, is taken before a dripper.
func TestLoginPoolKeepsAPlaceWhoseHelloWaitsUnread(t *testing.T) {
	hello := helloBytes(t, "p")
	promptPeer, promptSrv := tcpPair(t)
	if _, err := promptPeer.Write(hello); err != nil {
		t.Fatal(err)
	}
	waitUnread(t, promptSrv, len(hello))
	_, dripSrv := tcpPair(t)
	garbagePeer, garbageSrv := tcpPair(t)
	if _, err := garbagePeer.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitUnread(t, garbageSrv, 10)

	t0 := time.Unix(1000, 0)
	place := func(nc net.Conn, age time.Duration, progress int64) *loginPlace {
		p := &loginPlace{conn: &conn{endpoint: endpoint{nc: nc}}, since: t0.Add(-age)}
		p.progress.Store(progress)
		return p
	}
	var h handshakes
	h.init()
	pool := &h.net
	prompt := place(promptSrv, 3*time.Second, 0) // the oldest, nothing read
	drip := place(dripSrv, 2*time.Second, 50)
	for _, p := range []*loginPlace{prompt, drip} {
		p.elem = pool.order.PushBack(p)
	}
	if v := pool.victim(t0, t0, "", h.unread); v != drip {
		t.Fatalf("the victim is the prompt client (%v); want the dripper", v == prompt)
	}
	garbage := place(garbageSrv, time.Second, 0)
	garbage.elem = pool.order.PushBack(garbage)
	if v := pool.victim(t0, t0, "", h.unread); v != garbage {
		t.Fatal("garbage waiting unread was not the victim")
	}
	pool.remove(garbage)
	httpPlace := &loginPlace{nc: garbageSrv, since: t0.Add(-time.Second)}
	httpPlace.elem = pool.order.PushBack(httpPlace)
	if v := pool.victim(t0, t0, "", h.unread); v != httpPlace {
		t.Fatal("an HTTP place with nothing of a hello was not the victim")
	}
}
