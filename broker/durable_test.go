package broker_test

// The relay role over real sockets: pushes answered once on disk, a
// receive session that only the device's key opens, deliveries in order,
// acks scoped to the session's device, and a new session re-sending what
// was not acked.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

func relayBroker(t *testing.T) *testbroker.Env {
	t.Helper()
	return testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
}

func sealedTo(t testing.TB, author *seal.Identity, to *seal.Identity, body string) []byte {
	t.Helper()
	msg, err := seal.NewMessage(seal.KindSync, "g", []byte(body), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	blob, err := seal.Seal(author, to.Public(), msg)
	if err != nil {
		t.Fatal(err)
	}
	return blob
}

func identity(t testing.TB) *seal.Identity {
	t.Helper()
	id, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func ask(t *testing.T, r *testbroker.Raw, cmd, id string, body []byte) *wire.Message {
	t.Helper()
	r.Send(t, wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, id).WithBody(body))
	return readReply(t, r, id)
}

func receive(t *testing.T, r *testbroker.Raw, id string, dev *seal.Identity, nonce []byte) *wire.Message {
	t.Helper()
	body, _ := json.Marshal(wire.DurableReceive{Device: dev.ID().String(), Public: dev.Public().Bytes(), Sig: dev.ProveReceive(nonce)})
	return ask(t, r, wire.CmdDurableReceive, id, body)
}

func TestRelayStoresPushesAndDeliversThemInOrder(t *testing.T) {
	e := relayBroker(t)
	alice, bob := identity(t), identity(t)
	sender := e.DialRaw(t)
	sender.Hello(t, wire.ProtocolVersion, "sender", "local", e.Secrets["local"])
	for i := range 3 {
		m := ask(t, sender, wire.CmdDurablePush, fmt.Sprint("p", i), sealedTo(t, alice, bob, fmt.Sprint("hello ", i)))
		if m.Value(wire.HeaderRC) != "0" || string(m.Body()) != fmt.Sprint(i+1) {
			t.Fatalf("push %d: %v", i, m)
		}
	}
	// Bob's device, on another connection, proves its key and receives.
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "bob", "local", e.Secrets["local"])
	if m := receive(t, r, "rx", bob, r.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("receive: %v", m)
	}
	for i := range 3 {
		m := r.Read(t)
		if m.Value(wire.HeaderCommand) != wire.CmdDurableDeliver || m.Value(wire.HeaderID) != fmt.Sprint(i+1) {
			t.Fatalf("delivery %d: %v", i, m)
		}
		in, err := seal.Open(bob, m.Body(), seal.SendersFunc(func(string, seal.DeviceID) (seal.Public, bool) { return alice.Public(), true }))
		if err != nil || string(in.Body) != fmt.Sprint("hello ", i) {
			t.Fatalf("delivery %d opens to %q, %v", i, in.Body, err)
		}
	}
	// Ack the first; a new session re-sends the other two, in order.
	if m := ask(t, r, wire.CmdDurableAck, "a1", []byte("1")); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("ack: %v", m)
	}
	r2 := e.DialRaw(t)
	r2.Hello(t, wire.ProtocolVersion, "bob2", "local", e.Secrets["local"])
	if m := receive(t, r2, "rx2", bob, r2.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("second receive: %v", m)
	}
	for _, want := range []string{"2", "3"} {
		if m := r2.Read(t); m.Value(wire.HeaderID) != want {
			t.Fatalf("new session delivered %v, want seq %s", m, want)
		}
	}
}

// Only a connection that proves the device's key receives its inbox: a
// proof made for another connection's nonce, or by another device, is
// refused. An ack outside a session, or of a blob not in the session's
// inbox, is refused too.
func TestRelayReceiveNeedsTheDeviceKey(t *testing.T) {
	e := relayBroker(t)
	bob, mallory := identity(t), identity(t)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "m", "local", e.Secrets["local"])
	if m := ask(t, r, wire.CmdDurableAck, "a0", []byte("1")); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("ack without a session: %v", m)
	}
	stale := make([]byte, len(r.Info.Nonce)) // not this connection's nonce
	if m := receive(t, r, "rx1", bob, stale); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("a proof for another nonce: %v", m)
	}
	body, _ := json.Marshal(wire.DurableReceive{Device: bob.ID().String(), Public: bob.Public().Bytes(), Sig: mallory.ProveReceive(r.Info.Nonce)})
	if m := ask(t, r, wire.CmdDurableReceive, "rx2", body); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("another device's proof: %v", m)
	}
	if m := receive(t, r, "rx3", mallory, r.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("its own receive: %v", m)
	}
	if m := ask(t, r, wire.CmdDurableAck, "a1", []byte("1")); m.Value(wire.HeaderResult) != string(wire.ResultRejected) ||
		!strings.Contains(m.Value(wire.HeaderError), "no blob 1") {
		t.Fatalf("ack of a blob not in the inbox: %v", m)
	}
}

// A push the relay cannot store is refused with a code and no content:
// what is not a sealed blob is MALFORMED; a broker without a relay
// directory refuses every durable command.
func TestRelayRefusesWhatItCannotStore(t *testing.T) {
	e := relayBroker(t)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "s", "local", e.Secrets["local"])
	m := ask(t, r, wire.CmdDurablePush, "p", []byte("not a blob"))
	if m.Value(wire.HeaderResult) != string(wire.ResultMalformed) || strings.Contains(m.Value(wire.HeaderError), "not a blob") {
		t.Fatalf("a push of junk: %v", m)
	}
	plain := testbroker.Start(t, "unix", testOpts())
	p := plain.DialRaw(t)
	p.Hello(t, wire.ProtocolVersion, "s", "local", plain.Secrets["local"])
	if m := ask(t, p, wire.CmdDurablePush, "p", sealedTo(t, identity(t), identity(t), "x")); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("a push to a broker that is no relay: %v", m)
	}
}

// What the relay keeps on disk holds no byte of a message's body, nor its
// sender's device id: it stores sealed blobs it cannot open.
func TestRelayStoreHoldsNoPlaintext(t *testing.T) {
	dir := t.TempDir()
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: dir})
	alice, bob := identity(t), identity(t)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "s", "local", e.Secrets["local"])
	const secret = "the quarterly figures are excellent"
	if m := ask(t, r, wire.CmdDurablePush, "p", sealedTo(t, alice, bob, secret)); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("push: %v", m)
	}
	var files int
	var routed bool // the store names the recipient it routes by
	aliceID := alice.ID()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for what, b := range map[string][]byte{"the body": []byte(secret), "the sender's id": []byte(alice.ID().String()), "the sender's raw id": aliceID[:]} {
			if bytes.Contains(raw, b) {
				t.Errorf("%s holds %s", path, what)
			}
		}
		if bytes.Contains(raw, []byte(bob.ID().String())) {
			routed = true
		}
		return nil
	})
	if err != nil || files == 0 || !routed {
		t.Fatalf("walked %d files (the recipient named in one: %v): %v", files, routed, err)
	}
}

// The relay's limits are the broker's options: with a push rate of 1 a
// second and a burst of 1, one push into an inbox goes through and the
// next is refused RATE_LIMITED (temporary, no content); another inbox is
// not affected.
func TestRelayPushRateIsAnOption(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir(), Relay: relay.Options{MaxPushRate: 1, PushBurst: 1}})
	alice, bob, carol := identity(t), identity(t), identity(t)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "s", "local", e.Secrets["local"])
	if m := ask(t, r, wire.CmdDurablePush, "p1", sealedTo(t, alice, bob, "1")); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("the first push: %v", m)
	}
	if m := ask(t, r, wire.CmdDurablePush, "p2", sealedTo(t, alice, bob, "2")); m.Value(wire.HeaderResult) != string(wire.ResultRateLimited) {
		t.Fatalf("a push past the rate: %v", m)
	}
	if m := ask(t, r, wire.CmdDurablePush, "p3", sealedTo(t, alice, carol, "3")); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("a push into another inbox: %v", m)
	}
}
