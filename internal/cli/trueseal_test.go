package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flynn/noise"

	"busbar/edge/trueseal"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/ops"
)

var truesealSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)

// tsConn is a trueseal client session over TCP, as trueseal's clients
// speak it: Noise messages with a u16 length, one frame each.
type tsConn struct {
	t          *testing.T
	c          net.Conn
	send, recv *noise.CipherState
}

func tsWrite(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)); err != nil {
		t.Fatal(err)
	}
}

func tsRead(t *testing.T, c net.Conn) []byte {
	t.Helper()
	var head [2]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, binary.BigEndian.Uint16(head[:]))
	if _, err := io.ReadFull(c, msg); err != nil {
		t.Fatal(err)
	}
	return msg
}

func tsDial(t *testing.T, addr string, relayPub []byte, device *noise.DHKey) *tsConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cfg := noise.Config{CipherSuite: truesealSuite, Pattern: noise.HandshakeNK, Initiator: true, PeerStatic: relayPub}
	if device != nil {
		cfg = noise.Config{CipherSuite: truesealSuite, Pattern: noise.HandshakeXX, Initiator: true, StaticKeypair: *device}
	}
	hs, err := noise.NewHandshakeState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	msg, _, _, _ := hs.WriteMessage(nil, nil)
	tsWrite(t, c, msg)
	_, cs1, cs2, err := hs.ReadMessage(nil, tsRead(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if device != nil {
		if !bytes.Equal(hs.PeerStatic(), relayPub) {
			t.Fatal("the relay's key is not the one printed")
		}
		msg, cs1, cs2, _ = hs.WriteMessage(nil, nil)
		tsWrite(t, c, msg)
	}
	return &tsConn{t: t, c: c, send: cs1, recv: cs2}
}

func (s *tsConn) write(typ trueseal.Type, body []byte) {
	ct, err := s.send.Encrypt(nil, nil, trueseal.AppendFrame(nil, typ, body))
	if err != nil {
		s.t.Fatal(err)
	}
	tsWrite(s.t, s.c, ct)
}

func (s *tsConn) expect(want trueseal.Type) []byte {
	s.t.Helper()
	plain, err := s.recv.Decrypt(nil, nil, tsRead(s.t, s.c))
	if err != nil {
		s.t.Fatal(err)
	}
	typ, body, err := trueseal.ParseFrame(plain)
	if err != nil || typ != want {
		s.t.Fatalf("got %v (%v), want %v", typ, err, want)
	}
	return body
}

var truesealLine = regexp.MustCompile(`busbar: trueseal relay on tcp://(\S+) \(push and receive sessions\), relay public key ([0-9a-f]{64})`)

func startTrueseal(t *testing.T, data string, args ...string) (s *server, addr string, key []byte) {
	t.Helper()
	s = startServe(t, data, append([]string{"--trueseal", "127.0.0.1:0"}, args...)...)
	var m []string
	testbroker.Eventually(t, 10*time.Second, "serve to print the trueseal line", func() bool {
		m = truesealLine.FindStringSubmatch(s.stdout.String())
		return m != nil
	})
	key, err := hex.DecodeString(m[2])
	if err != nil {
		t.Fatal(err)
	}
	return s, m[1], key
}

func TestServeTruesealStoresAPushAcrossACrashAndDeliversIt(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s, addr, key := startTrueseal(t, data)
	if !strings.Contains(s.stdout.String(), "created the trueseal relay key on first start: "+filepath.Join(data, trueseal.KeyFile)) {
		t.Fatalf("first start did not say it created the key:\n%s", s.stdout.String())
	}
	code, out, errOut := run(t, "", "trueseal", "key", "--data", data)
	if code != 0 || strings.TrimSpace(out) != hex.EncodeToString(key) {
		t.Fatalf("busbar trueseal key: exit %d %q %s", code, out, errOut)
	}

	dev, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := tsDial(t, addr, key, nil)
	p.write(trueseal.Push, append(append([]byte(nil), dev.Public...), "sealed"...))
	p.expect(trueseal.Ack)
	s.kill(t) // acked: on disk, whatever happens to the process now

	s2, addr2, key2 := startTrueseal(t, data)
	if !bytes.Equal(key2, key) {
		t.Fatal("the relay key changed across a restart")
	}
	if strings.Contains(s2.stdout.String(), "created the trueseal relay key") {
		t.Fatal("the second start created a key again")
	}
	r := tsDial(t, addr2, key2, &dev)
	body := r.expect(trueseal.Deliver)
	id, env, err := trueseal.ParseBlobID(body)
	if err != nil || string(env) != "sealed" {
		t.Fatalf("deliver: %q %v", env, err)
	}
	r.write(trueseal.DeliverAck, binary.BigEndian.AppendUint64(nil, id))
	// The ack is applied before the relay reads the next frame; a new
	// session then has nothing to deliver but the next push.
	r.write(trueseal.Heartbeat, nil)
	r.expect(trueseal.Heartbeat)
	r.c.Close()
	r2 := tsDial(t, addr2, key2, &dev)
	p2 := tsDial(t, addr2, key2, nil)
	p2.write(trueseal.Push, append(append([]byte(nil), dev.Public...), "next"...))
	p2.expect(trueseal.Ack)
	if _, env, _ := trueseal.ParseBlobID(r2.expect(trueseal.Deliver)); string(env) != "next" {
		t.Fatalf("the new session got %q first, want the next push (the acked blob is gone)", env)
	}

	// /metrics counts the trueseal inbox apart, by protocol, with no key.
	m := regexp.MustCompile(`busbar: dashboard at (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]+)\n`).FindStringSubmatch(s2.banner + "\n")
	if m == nil {
		t.Fatalf("no dashboard URL:\n%s", s2.banner)
	}
	code, text := httpGet(t, m[1]+ops.MetricsPath, m[2])
	for _, want := range []string{`busbar_relay_protocol_inboxes{protocol="trueseal"} 1`, `busbar_relay_protocol_blobs{protocol="busbar"} 0`, `busbar_trueseal_delivered_total 2`, `busbar_trueseal_pushes_total{result="acked"} 1`} {
		if code != 200 || !strings.Contains(text, want) {
			t.Fatalf("metrics: %d, no %s in:\n%s", code, want, text)
		}
	}
	if strings.Contains(text, hex.EncodeToString(dev.Public)) || strings.Contains(text, trueseal.DeviceID(dev.Public)) {
		t.Fatal("/metrics names the device")
	}
	// serve's logs name neither the device nor any key.
	for _, st := range []string{s.stderr.String(), s2.stderr.String(), s2.stdout.String()} {
		if strings.Contains(st, hex.EncodeToString(dev.Public)) || strings.Contains(st, trueseal.DeviceID(dev.Public)) || strings.Contains(st, hex.EncodeToString(dev.Private)) {
			t.Fatalf("serve's output names the device:\n%s", st)
		}
	}
	// The status the dashboard renders: the same split, counts only.
	code, js := httpGet(t, m[1]+ops.StatusPath, m[2])
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); code != 200 || err != nil {
		t.Fatalf("status: %d %v", code, err)
	}
	if got := st.RelayProtocols["trueseal"]; got.Inboxes != 1 || got.Blobs != 1 || got.Bytes != int64(len("next")) {
		t.Fatalf("status relay_protocols: %+v", st.RelayProtocols)
	}
	if strings.Contains(js, trueseal.DeviceID(dev.Public)) {
		t.Fatal("the status names the device")
	}
}

func TestServeTruesealOnTwoAddressesServesBothSessionsOnEach(t *testing.T) {
	// An SDK that dials trueseal-relay's two ports (receive, push) gets
	// both from one relay.
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--trueseal", "127.0.0.1:0,127.0.0.1:0")
	var m [][]string
	testbroker.Eventually(t, 10*time.Second, "serve to print two trueseal lines", func() bool {
		m = truesealLine.FindAllStringSubmatch(s.stdout.String(), -1)
		return len(m) == 2
	})
	key, _ := hex.DecodeString(m[0][2])
	if m[0][1] == m[1][1] || m[0][2] != m[1][2] {
		t.Fatalf("two listeners should differ in address and share the key: %q", m)
	}
	dev, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := tsDial(t, m[0][1], key, &dev)
	p := tsDial(t, m[1][1], key, nil)
	p.write(trueseal.Push, append(append([]byte(nil), dev.Public...), "two ports"...))
	p.expect(trueseal.Ack)
	if _, env, _ := trueseal.ParseBlobID(r.expect(trueseal.Deliver)); string(env) != "two ports" {
		t.Fatalf("got %q", env)
	}
}

// TestServeTruesealOnABusSharesOneKeyFile: on a bus with relay brokers,
// --trueseal needs --trueseal-key, one key file every broker is given
// (`busbar trueseal key --trueseal-key FILE` makes it), so a client pinned
// to that key may push through one broker and receive through another.
func TestServeTruesealOnABusSharesOneKeyFile(t *testing.T) {
	nats := testnats.Start(t, 2)
	bus := []string{"--nats-heartbeat", "100ms", "--nats-lease", "3s", "--nats-relays", "b2"}
	code, _, errOut := run(t, "", append([]string{"serve", "--data", filepath.Join(t.TempDir(), "x"), "--trueseal", "127.0.0.1:0", "--name", "b1", "--nats", nats.URL(0)}, bus...)...)
	if code != exitUsage || !strings.Contains(errOut, "needs --trueseal-key FILE") {
		t.Fatalf("--trueseal on a bus without a key file: exit %d %q", code, errOut)
	}
	keyFile := filepath.Join(t.TempDir(), "relay.key")
	code, out, errOut := run(t, "", "trueseal", "key", "--trueseal-key", keyFile)
	if code != 0 || !strings.Contains(errOut, "created "+keyFile) {
		t.Fatalf("busbar trueseal key --trueseal-key: exit %d %q %q", code, out, errOut)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v", fi, err)
	}
	missing := filepath.Join(t.TempDir(), "none.key")
	code, _, errOut = run(t, "", append([]string{"serve", "--data", filepath.Join(t.TempDir(), "y"), "--trueseal", "127.0.0.1:0", "--trueseal-key", missing, "--name", "b1", "--nats", nats.URL(0)}, bus...)...)
	if code == 0 || !strings.Contains(errOut, missing) {
		t.Fatalf("--trueseal-key of a missing file: exit %d %q (serve must not create a key of its own)", code, errOut)
	}

	b1, addr1, key1 := startTrueseal(t, filepath.Join(t.TempDir(), "b1"), append([]string{"--trueseal-key", keyFile, "--name", "b1", "--nats", nats.URL(0)}, bus...)...)
	b2, addr2, key2 := startTrueseal(t, filepath.Join(t.TempDir(), "b2"), append([]string{"--trueseal-key", keyFile, "--name", "b2", "--nats", nats.URL(1)}, bus...)...)
	if !bytes.Equal(key1, key2) || hex.EncodeToString(key1) != strings.TrimSpace(out) {
		t.Fatalf("the brokers serve keys %x and %x, the file holds %s", key1, key2, out)
	}
	b2.background(t, "sub", "news", "--name", "on-b2")
	testbroker.AwaitEvery(t, 20*time.Second, 100*time.Millisecond, "b1 to know b2", func() error {
		if code, out, _ := b1.busbar(t, "", "ls"); code != 0 || !strings.Contains(out, "on-b2") {
			return fmt.Errorf("b1 lists %s", out)
		}
		return nil
	})
	dev, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := tsDial(t, addr1, key1, nil)
	p.write(trueseal.Push, append(append([]byte(nil), dev.Public...), "through b1"...))
	p.expect(trueseal.Ack) // on b2's disk: b2 is the home of every inbox
	r := tsDial(t, addr2, key2, &dev)
	if _, env, err := trueseal.ParseBlobID(r.expect(trueseal.Deliver)); err != nil || string(env) != "through b1" {
		t.Fatalf("deliver through b2: %q %v", env, err)
	}
}

// TestServeTruesealStandsBehindTheBrokersDoor: serve gives the trueseal
// listener the broker's door (Broker.Door), so a refusal there is written
// through the broker's shared refusal log, with the source address and
// no key, and a push still works beside it.
func TestServeTruesealStandsBehindTheBrokersDoor(t *testing.T) {
	s, addr, key := startTrueseal(t, filepath.Join(t.TempDir(), "state"))
	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	tsWrite(t, bad, []byte("not a handshake")) // neither NK's first message nor XX's
	testbroker.Eventually(t, 10*time.Second, "the failed handshake in serve's log", func() bool {
		return strings.Contains(s.stderr.String(), "trueseal handshake failed")
	})
	line := s.stderr.String()
	if !strings.Contains(line, "127.0.0.1") || strings.Contains(line, hex.EncodeToString(key)) {
		t.Fatalf("the refusal line lacks the source address or names the relay key:\n%s", line)
	}
	dev, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := tsDial(t, addr, key, nil)
	p.write(trueseal.Push, append(append([]byte(nil), dev.Public...), "beside it"...))
	p.expect(trueseal.Ack)
}

// TestServeTruesealRefusesToJoinABusWhoseKeyDiffers: on a bus with relay
// brokers, a second `busbar serve --trueseal` given another key file than
// the broker already serving exits, naming both keys' fingerprints; the
// first goes on serving and logs the difference. Before, it served, and
// clients pinned to the bus's key failed their handshakes on it.
func TestServeTruesealRefusesToJoinABusWhoseKeyDiffers(t *testing.T) {
	nats := testnats.Start(t, 2)
	bus := []string{"--nats-heartbeat", "100ms", "--nats-lease", "3s", "--nats-relays", "b1"}
	keys := make([]string, 2)
	fps := make([]string, 2)
	for i := range keys {
		keys[i] = filepath.Join(t.TempDir(), "relay.key")
		code, out, errOut := run(t, "", "trueseal", "key", "--trueseal-key", keys[i])
		if code != 0 {
			t.Fatalf("busbar trueseal key: exit %d %s", code, errOut)
		}
		pub, err := hex.DecodeString(strings.TrimSpace(out))
		if err != nil {
			t.Fatal(err)
		}
		fps[i] = trueseal.KeyFingerprint(pub)
	}
	b1, addr1, key1 := startTrueseal(t, filepath.Join(t.TempDir(), "b1"), append([]string{"--trueseal-key", keys[0], "--name", "b1", "--nats", nats.URL(0)}, bus...)...)
	code, _, errOut := run(t, "", append([]string{"serve", "--data", filepath.Join(t.TempDir(), "b2"), "--trueseal", "127.0.0.1:0", "--trueseal-key", keys[1], "--name", "b2", "--nats", nats.URL(1)}, bus...)...)
	if code == 0 || !strings.Contains(errOut, "fingerprint "+fps[0]) || !strings.Contains(errOut, "fingerprint "+fps[1]) || !strings.Contains(errOut, "same --trueseal-key file") {
		t.Fatalf("serve with another key on the bus: exit %d %q, want a refusal naming %s and %s", code, errOut, fps[0], fps[1])
	}
	testbroker.Eventually(t, 10*time.Second, "b1 logs the difference", func() bool {
		return strings.Contains(b1.stderr.String(), "its_fingerprint="+fps[1])
	})
	dev, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := tsDial(t, addr1, key1, nil)
	p.write(trueseal.Push, append(append([]byte(nil), dev.Public...), "b1 still serves"...))
	p.expect(trueseal.Ack)
}
