package trueseal

// trueseal-relay's end-to-end client flow (its internal/relay/e2e_test.go
// and helpers_test.go), re-created here against this relay over TCP: the
// same Noise library and configurations, the same message framing, and
// its helpers' way of reading — one conn.Read for the 2-byte length and
// one for the message, which holds only if the relay writes each message
// in one piece. Its three flows: push then deliver to a device online,
// to a device that connects later, and redelivery after the device's TCP
// connection drops before its DeliverAck (docs/trueseal.md#trueseal-relays-own-e2e-flow).

import (
	"net"
	"testing"

	"github.com/flynn/noise"

	"busbar/relay"
)

func e2eWriteMsg(t *testing.T, conn net.Conn, msg []byte) {
	t.Helper()
	out := make([]byte, 2+len(msg))
	out[0], out[1] = byte(len(msg)>>8), byte(len(msg))
	copy(out[2:], msg)
	if _, err := conn.Write(out); err != nil {
		t.Fatalf("writeMsg: %v", err)
	}
}

func e2eReadMsg(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	lenbuf := make([]byte, 2)
	if _, err := conn.Read(lenbuf); err != nil {
		t.Fatalf("readMsg len: %v", err)
	}
	buf := make([]byte, int(lenbuf[0])<<8|int(lenbuf[1]))
	if n, err := conn.Read(buf); err != nil || n != len(buf) {
		t.Fatalf("readMsg body: %d of %d bytes, %v", n, len(buf), err)
	}
	return buf
}

func e2eCipherSuite() noise.CipherSuite {
	return noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)
}

// e2eDoPushSession: NK handshake, one Push, read the Ack.
func e2eDoPushSession(t *testing.T, conn net.Conn, relayPub, recipientPub, envelope []byte) {
	t.Helper()
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: e2eCipherSuite(), Pattern: noise.HandshakeNK, Initiator: true, PeerStatic: relayPub})
	if err != nil {
		t.Fatal(err)
	}
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e2eWriteMsg(t, conn, msg)
	_, cs1, cs2, err := hs.ReadMessage(nil, e2eReadMsg(t, conn))
	if err != nil {
		t.Fatalf("NK read resp: %v", err)
	}
	body := append(append([]byte(nil), recipientPub...), envelope...)
	frame, err := cs1.Encrypt(nil, nil, AppendFrame(nil, Push, body))
	if err != nil {
		t.Fatal(err)
	}
	e2eWriteMsg(t, conn, frame)
	plain, err := cs2.Decrypt(nil, nil, e2eReadMsg(t, conn))
	if err != nil {
		t.Fatal(err)
	}
	if typ, _, err := ParseFrame(plain); err != nil || typ != Ack {
		t.Fatalf("push answered %v %v, want Ack", typ, err)
	}
}

// e2eDoXXHandshake: XX as the device; returns the relay → device cipher.
func e2eDoXXHandshake(t *testing.T, conn net.Conn, deviceKey noise.DHKey) *noise.CipherState {
	t.Helper()
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: e2eCipherSuite(), Pattern: noise.HandshakeXX, Initiator: true, StaticKeypair: deviceKey})
	if err != nil {
		t.Fatal(err)
	}
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e2eWriteMsg(t, conn, msg)
	if _, _, _, err = hs.ReadMessage(nil, e2eReadMsg(t, conn)); err != nil {
		t.Fatalf("XX read e,ee,s,es: %v", err)
	}
	msg, _, cs2, err := hs.WriteMessage(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e2eWriteMsg(t, conn, msg)
	return cs2
}

func e2eExpectDeliver(t *testing.T, conn net.Conn, cs2 *noise.CipherState, want string) {
	t.Helper()
	plain, err := cs2.Decrypt(nil, nil, e2eReadMsg(t, conn))
	if err != nil {
		t.Fatalf("decrypt deliver: %v", err)
	}
	typ, body, err := ParseFrame(plain)
	if err != nil || typ != Deliver {
		t.Fatalf("want Deliver, got %v %v", typ, err)
	}
	_, env, err := ParseBlobID(body)
	if err != nil || string(env) != want {
		t.Fatalf("want %q, got %q (%v)", want, env, err)
	}
}

func TestTruesealRelayE2EPushDeliverOnline(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	device := newDevice(t)
	recv := dial(t, f.addr)
	cs2 := e2eDoXXHandshake(t, recv, device)
	checkFor(t, "the receive session is registered", func() bool { return f.srv.Stats().ReceiveSessions == 1 })
	e2eDoPushSession(t, dial(t, f.addr), f.key.Public, device.Public, []byte("hello-device-b"))
	e2eExpectDeliver(t, recv, cs2, "hello-device-b")
}

func TestTruesealRelayE2EPushDeliverOffline(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	device := newDevice(t)
	e2eDoPushSession(t, dial(t, f.addr), f.key.Public, device.Public, []byte("offline-blob"))
	recv := dial(t, f.addr)
	cs2 := e2eDoXXHandshake(t, recv, device)
	e2eExpectDeliver(t, recv, cs2, "offline-blob")
}

func TestTruesealRelayE2ETCPDropBeforeAckRedelivers(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	device := newDevice(t)
	e2eDoPushSession(t, dial(t, f.addr), f.key.Public, device.Public, []byte("drop-me"))
	recv1 := dial(t, f.addr)
	e2eExpectDeliver(t, recv1, e2eDoXXHandshake(t, recv1, device), "drop-me")
	recv1.Close() // no DeliverAck
	recv2 := dial(t, f.addr)
	e2eExpectDeliver(t, recv2, e2eDoXXHandshake(t, recv2, device), "drop-me")
}
