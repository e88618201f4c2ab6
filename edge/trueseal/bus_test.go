package trueseal

// trueseal inboxes on a bus (docs/trueseal.md#on-a-bus): two brokers
// joined through an embedded NATS cluster, b2 the only relay broker (the
// home of every inbox), a trueseal server with the same key on each. What
// b1 takes is forwarded to b2 and stored there.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"busbar/broker"
	"busbar/edge/edgetest"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
	"busbar/internal/testclient"
	"busbar/internal/testnats"
)

// busRelay is a broker of the bus and the trueseal server on it.
type busRelay struct {
	env  *testbroker.Env
	srv  *Server
	addr string
	logs *edgetest.LogBuffer // the broker's log, at debug level
}

// startBusRelays runs b1 and b2 on two NATS servers, b2 the bus's only
// relay broker, each with a trueseal server whose key is key.
func startBusRelays(t *testing.T, mods ...func(*server.Options)) (a, b *busRelay, key []byte) {
	t.Helper()
	nc := testnats.Start(t, 2, mods...)
	k := newDevice(t) // one key pair for both servers: the shared key file's
	var out []*busRelay
	for i := range 2 {
		logs := &edgetest.LogBuffer{}
		opts := broker.Options{Name: fmt.Sprintf("b%d", i+1), RelayDir: t.TempDir(),
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		opts.Cluster = broker.ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: testbus.Heartbeat, Lease: testbus.Lease, Relays: []string{"b2"}}
		env := testbroker.Start(t, "tcp", opts)
		inboxes, err := BusInboxes(env.Broker)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(Options{Key: k, Store: env.Broker.RelayStore(), Inboxes: inboxes})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		t.Cleanup(func() { // before the broker's own cleanup: the store outlives the sessions
			srv.Close()
			<-served
		})
		out = append(out, &busRelay{env: env, srv: srv, addr: ln.Addr().String(), logs: logs})
	}
	for i, r := range out {
		testclient.Connect(t, r.env, "probe-"+r.env.Broker.Name()) // a node for the other to see
		other := out[1-i]
		testbroker.Await(t, testbus.Settle, other.env.Broker.Name()+" sees "+r.env.Broker.Name(), func() error {
			if !other.sees(r.env.Broker.Name()) {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	return out[0], out[1], k.Public
}

// sees reports whether r's broker lists a node of broker name: it knows
// that broker is on the bus.
func (r *busRelay) sees(name string) bool {
	for _, n := range r.env.Broker.Directory() {
		if n.Broker == name {
			return true
		}
	}
	return false
}

// checkLogs fails t if a broker's log holds the device's key (as bytes,
// hex or inbox id) or a byte of an envelope (each starts with "sealed").
func checkLogs(t *testing.T, dev []byte, relays ...*busRelay) {
	t.Helper()
	for _, r := range relays {
		logs := r.logs.Bytes()
		for what, s := range map[string][]byte{
			"the device's key": dev, "the device's key, in hex": []byte(PublicKeyText(dev)),
			"the device's inbox id": []byte(DeviceID(dev)), "an envelope": []byte("sealed"),
		} {
			if bytes.Contains(logs, s) {
				t.Errorf("%s's log holds %s", r.env.Broker.Name(), what)
			}
		}
	}
}

// blobs is how many blobs dev's inbox holds in r's own store.
func (r *busRelay) blobs(dev []byte) int {
	return r.env.Broker.RelayStore().Inbox(DeviceID(dev)).Blobs
}

func TestBusInboxIsReachedThroughAnyBroker(t *testing.T) {
	a, b, key := startBusRelays(t)
	dev := newDevice(t)

	p := pushSession(t, a.addr, key)
	for i := range 3 {
		p.push(dev.Public, fmt.Appendf(nil, "sealed %d", i))
	}
	for range 3 {
		p.expect(Ack)
	}
	// Acked means on the home's disk: b2 holds them, b1 nothing.
	if got := b.blobs(dev.Public); got != 3 {
		t.Fatalf("the home holds %d blobs after three acks, want 3", got)
	}
	if got := a.blobs(dev.Public); got != 0 {
		t.Fatalf("the broker that took the pushes holds %d blobs, want 0", got)
	}

	// A session through b1 gets the home's blobs, with their ids, in order.
	r := receiveSession(t, a.addr, key, dev)
	var ids []uint64
	for i := range 3 {
		id, env := r.deliver()
		if want := fmt.Sprintf("sealed %d", i); string(env) != want {
			t.Fatalf("delivered %q, want %q", env, want)
		}
		ids = append(ids, id)
	}
	r.deliverAck(ids[0]) // deletes on the home
	testbroker.Await(t, testbus.Settle, "the DeliverAck to delete the blob on the home", func() error {
		if got := b.blobs(dev.Public); got != 2 {
			return fmt.Errorf("the home holds %d blobs", got)
		}
		return nil
	})
	r.c.Close()

	// The two not acked come again on a new session, here on the home.
	r2 := receiveSession(t, b.addr, key, dev)
	for i := 1; i < 3; i++ {
		id, env := r2.deliver()
		if id != ids[i] || string(env) != fmt.Sprintf("sealed %d", i) {
			t.Fatalf("redelivered %d %q, want %d %q", id, env, ids[i], fmt.Sprintf("sealed %d", i))
		}
	}
	r2.c.Close()

	// And again through b1, where the device acks them.
	r3 := receiveSession(t, a.addr, key, dev)
	for i := 1; i < 3; i++ {
		id, _ := r3.deliver()
		if id != ids[i] {
			t.Fatalf("redelivered blob %d, want %d", id, ids[i])
		}
		r3.deliverAck(id)
	}
	testbroker.Await(t, testbus.Settle, "the inbox to be empty on the home", func() error {
		if got := b.blobs(dev.Public); got != 0 {
			return fmt.Errorf("the home holds %d blobs", got)
		}
		return nil
	})
	r3.c.Close()
	checkLogs(t, dev.Public, a, b)
}

func TestBusDeliverAckOfAnotherDeviceDeletesNothingOnTheHome(t *testing.T) {
	a, b, key := startBusRelays(t)
	dev, other := newDevice(t), newDevice(t)
	p := pushSession(t, a.addr, key)
	p.push(dev.Public, []byte("for dev"))
	p.expect(Ack)
	p.push(other.Public, []byte("for other"))
	p.expect(Ack)
	r := receiveSession(t, a.addr, key, dev)
	devID, _ := r.deliver()
	ro := receiveSession(t, a.addr, key, other)
	otherID, _ := ro.deliver()
	ro.deliverAck(devID) // not other's blob
	ro.deliverAck(otherID)
	testbroker.Await(t, testbus.Settle, "other's own blob to be deleted", func() error {
		if got := b.blobs(other.Public); got != 0 {
			return fmt.Errorf("other's inbox holds %d", got)
		}
		return nil
	})
	if got := b.blobs(dev.Public); got != 1 {
		t.Fatalf("dev's inbox holds %d blobs after another device acked its blob id, want 1", got)
	}
}

func TestBusPushIsNotAckedAndSessionsCloseWhenTheHomeIsDown(t *testing.T) {
	a, b, key := startBusRelays(t)
	dev := newDevice(t)
	r := receiveSession(t, a.addr, key, dev)
	p := pushSession(t, a.addr, key)
	p.push(dev.Public, []byte("sealed before"))
	p.expect(Ack)
	r.deliver()

	b.srv.Close()
	if err := b.env.Broker.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The receive session through b1 ends: the device reconnects.
	r.expectEnd()
	testbroker.Await(t, testbus.Settle, "b1 to see the home gone", func() error {
		if a.sees("b2") {
			return fmt.Errorf("b1 still lists b2's nodes")
		}
		return nil
	})
	// A push for an inbox whose home is away is refused for now: no Ack
	// and no Error (which would make the client drop it), the session
	// closed, so the client keeps the blob and pushes it again later.
	p.push(dev.Public, []byte("sealed while the home is down"))
	p.expectEnd()
	// A receive session cannot open either: closed at once.
	r2 := receiveSession(t, a.addr, key, dev)
	r2.expectEnd()
	checkLogs(t, dev.Public, a, b)
}

// TestBusPushOverTheNATSPayloadIsRefusedForGood: a push forwarded to its
// home must fit NATS's max_payload less broker.ClusterRelayHeaderRoom (the
// device id and the rest go in headers); one byte more is refused for
// good, Error, as the SDK must drop it, and the session goes on.
func TestBusPushOverTheNATSPayloadIsRefusedForGood(t *testing.T) {
	const maxPayload = 16 << 10 // NATS's default 1 MiB is past any envelope
	a, b, key := startBusRelays(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	dev := newDevice(t)
	limit := maxPayload - broker.ClusterRelayHeaderRoom
	p := pushSession(t, a.addr, key)
	p.push(dev.Public, bytes.Repeat([]byte("s"), limit))
	p.expect(Ack)
	p.push(dev.Public, bytes.Repeat([]byte("s"), limit+1))
	p.expect(Error)
	p.push(dev.Public, []byte("small"))
	p.expect(Ack)
	if got := b.blobs(dev.Public); got != 2 {
		t.Fatalf("the home holds %d blobs, want 2", got)
	}
}

// A broker that joins a bus with relay brokers holding another trueseal
// key than a broker already serving refuses to serve (JoinBus returns an
// *broker.EdgeKeyError naming both fingerprints); the broker already
// serving logs the difference, naming both, and goes on; with the same
// key the newcomer joins. Before, nothing was checked: the odd broker
// served, and a client pinned to the bus's key failed its handshake on
// it (shown first, on the wire).
func TestBusBrokerWithAnotherTruesealKeyRefusesToJoin(t *testing.T) {
	a, b, key := startBusRelays(t)
	odd := newDevice(t)
	srv, err := NewServer(Options{Key: odd, Store: b.env.Broker.RelayStore(), Inboxes: storeInboxes{b.env.Broker.RelayStore()}})
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Pipe()
	go srv.ServeConn(c2)
	t.Cleanup(func() { srv.Close() })
	if err := pushHandshake(&client{t: t, c: c1}, key); err == nil {
		t.Fatal("a push handshake to the bus's key succeeded against another key")
	}
	c1.Close()

	ctx := t.Context()
	if err := JoinBus(ctx, a.env.Broker, key); err != nil {
		t.Fatalf("b1 alone with its key: %v", err)
	}
	err = JoinBus(ctx, b.env.Broker, odd.Public)
	var ke *broker.EdgeKeyError
	if !errors.As(err, &ke) || ke.Broker != "b1" || ke.Proto != Protocol || ke.Theirs != KeyFingerprint(key) || ke.Ours != KeyFingerprint(odd.Public) {
		t.Fatalf("b2 with another key: %v, want an EdgeKeyError naming b1 and both fingerprints", err)
	}
	if !strings.Contains(err.Error(), KeyFingerprint(key)) || !strings.Contains(err.Error(), KeyFingerprint(odd.Public)) {
		t.Fatalf("the refusal does not name both fingerprints: %v", err)
	}
	checkFor(t, "b1 logs the difference, naming both fingerprints", func() bool {
		logs := string(a.logs.Bytes())
		return strings.Contains(logs, "its_fingerprint="+KeyFingerprint(odd.Public)) && strings.Contains(logs, "this_fingerprint="+KeyFingerprint(key))
	})
	if err := JoinBus(ctx, b.env.Broker, key); err != nil {
		t.Fatalf("b2 with the bus's key: %v", err)
	}
	// b1 still serves: a push through it is acked on b2, the home.
	dev := newDevice(t)
	p := pushSession(t, a.addr, key)
	p.push(dev.Public, []byte("after the check"))
	p.expect(Ack)
	if n := b.blobs(dev.Public); n != 1 {
		t.Fatalf("b2 holds %d blobs", n)
	}
	checkLogs(t, dev.Public, a, b)
}

// The fingerprint is the head of the public key's hex: KeyFingerprintDigits
// digits, what `busbar trueseal key` prints first.
func TestKeyFingerprintIsTheHeadOfThePublicKeysHex(t *testing.T) {
	k := newDevice(t)
	fp := KeyFingerprint(k.Public)
	if len(fp) != KeyFingerprintDigits || !strings.HasPrefix(PublicKeyText(k.Public), fp) {
		t.Fatalf("fingerprint %q of %s", fp, PublicKeyText(k.Public))
	}
}
