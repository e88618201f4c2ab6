package broker_test

// The bus key (docs/cluster.md#bus-key), on real brokers joined through a
// real NATS cluster, with a NATS client of the attacker's own that may
// read and publish every subject of the bus.

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/wire"
)

// keyedBus is a bus of brokers, broker i with keys[i] (nil: none) and
// sealing as asked.
func keyedBus(t *testing.T, seal bool, keys ...[]byte) *bus {
	t.Helper()
	nc := testnats.Start(t, 3)
	u := &bus{nats: nc}
	for i, k := range keys {
		opts := testOpts()
		opts.Cluster.BusKey, opts.Cluster.SealPayloads = k, seal && k != nil
		u.brokers = append(u.brokers, u.startBrokerWith(t, opts, i, nc.URL(i%3)))
	}
	return u
}

var (
	busKeyA = []byte("the brokers' own bus key, 32 bytes and more")
	busKeyB = []byte("a different bus key, also 32 bytes and more")
)

// spy is a NATS client of the attacker's, recording what crosses NATS.
type spy struct {
	nc   *nats.Conn
	mu   sync.Mutex
	msgs []*nats.Msg
}

func newSpy(t *testing.T, url, subject string) *spy {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := &spy{nc: nc}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// first waits for a message on a subject with prefix and returns it.
func (s *spy) first(t *testing.T, prefix string) *nats.Msg {
	t.Helper()
	var got *nats.Msg
	testbroker.Eventually(t, 10*time.Second, "a message on "+prefix+"*", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := slices.IndexFunc(s.msgs, func(m *nats.Msg) bool { return strings.HasPrefix(m.Subject, prefix) })
		if i >= 0 {
			got = s.msgs[i]
		}
		return got != nil
	})
	return got
}

func (s *spy) publish(t *testing.T, subject string, data []byte) {
	t.Helper()
	if err := s.nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
}

func refusedByKey(e *testbroker.Env) int64 { return e.Broker.Stats().Drops[broker.DropBusKey] }

// awaitRefused waits until e refused n more messages by the key than
// before.
func awaitRefused(t *testing.T, e *testbroker.Env, before int64, n int64, what string) {
	t.Helper()
	testbroker.Eventually(t, 10*time.Second, what+" refused by the bus key", func() bool { return refusedByKey(e)-before >= n })
}

// TestBusKeyRefusesWhatNATSAccessAloneForges: with a bus key, a NATS
// client that may publish on every subject of the bus, but has no key,
// cannot add a broker's nodes, speak on a link, say goodbye for a broker,
// replay a broker's own message or move it to another subject: each is
// refused and counted, and the bus goes on as before.
func TestBusKeyRefusesWhatNATSAccessAloneForges(t *testing.T) {
	u := keyedBus(t, false, busKeyA, busKeyA)
	b1, b2 := u.brokers[0], u.brokers[1]
	spy := newSpy(t, u.nats.URL(2), "busbar.>")
	alpha := connect(t, b1, "alpha")
	connect(t, b2, "beta")
	var in inbox
	if _, err := alpha.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1", "beta": "b2"})

	// A directory share of a made-up broker, as a broker without a key
	// would send it.
	before := refusedByKey(b1)
	spy.publish(t, "busbar.dir.b9", []byte(`{"broker":"b9","iid":"x","gen":1,"part":0,"parts":1,"nodes":[{"node":"mallory","broker":"b9"}],"services":[]}`))
	// A link message in b2's name with an event for alpha.
	batch := make([]byte, 24)
	m := wire.New(wire.TypeEvent, "ev").WithHeader(wire.HeaderID, "f1").WithHeader(wire.HeaderTo, "alpha").
		WithHeader(wire.HeaderFrom, "beta.bus").WithBody([]byte("forged"))
	batch = binary.BigEndian.AppendUint32(batch, uint32(m.WireLen()))
	spy.publish(t, "busbar.to.b1.b2", m.AppendWire(batch))
	// b2's goodbye.
	spy.publish(t, "busbar.bye.b2", []byte(`{"broker":"b2"}`))
	awaitRefused(t, b1, before, 3, "the share, the link message and the goodbye")

	// b2's own directory share, replayed as it was, and moved to another
	// broker's subject.
	share := spy.first(t, "busbar.dir.b2")
	before = refusedByKey(b1)
	spy.publish(t, share.Subject, share.Data)
	spy.publish(t, "busbar.dir.b9", share.Data)
	awaitRefused(t, b1, before, 2, "a replayed and a moved share")

	awaitDirectory(t, u.brokers, map[string]string{"alpha": "b1", "beta": "b2"})
	if in.Len() != 0 {
		t.Fatalf("alpha got %d forged events", in.Len())
	}
	// And the bus still works: beta's event reaches alpha across it.
	beta := connect(t, b2, "beta2")
	awaitKnown(t, u.brokers[1:], "alpha")
	if r, err := beta.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", []byte("real")); err != nil || r.Result != wire.Accepted {
		t.Fatalf("beta2 → alpha: %+v %v", r, err)
	}
	testbroker.Eventually(t, 5*time.Second, "alpha's event", func() bool { return in.Len() >= 1 })
	if in.Len() != 1 || string(in.Get(0).Payload()) != "real" {
		t.Fatalf("alpha got %d events", in.Len())
	}
}

// TestBusKeySealedPayloadsAreUnreadableOnNATS: with --nats-bus-seal a NATS
// client reading every subject of the bus sees neither a message's body
// nor a node's name, while the message reaches its node.
func TestBusKeySealedPayloadsAreUnreadableOnNATS(t *testing.T) {
	u := keyedBus(t, true, busKeyA, busKeyA)
	spy := newSpy(t, u.nats.URL(2), "busbar.>")
	alpha := connect(t, u.brokers[0], "alpha-secret-name")
	connect(t, u.brokers[1], "beta")
	var in inbox
	if _, err := alpha.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	beta := connect(t, u.brokers[1], "beta2")
	awaitKnown(t, u.brokers[1:], "alpha-secret-name")
	body := []byte("a body only the nodes may read")
	if r, err := beta.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "alpha-secret-name", body); err != nil || r.Result != wire.Accepted {
		t.Fatalf("beta2 → alpha: %+v %v", r, err)
	}
	testbroker.Eventually(t, 5*time.Second, "alpha's event", func() bool { return in.Len() >= 1 })
	if in.Len() != 1 || !bytes.Equal(in.Get(0).Payload(), body) {
		t.Fatalf("alpha got %d events", in.Len())
	}
	link := spy.first(t, "busbar.to.b1.")
	spy.mu.Lock()
	defer spy.mu.Unlock()
	for _, m := range spy.msgs {
		if bytes.Contains(m.Data, body) || bytes.Contains(m.Data, []byte("alpha-secret-name")) {
			t.Fatalf("%s carries in clear: %q", m.Subject, m.Data)
		}
	}
	if len(link.Data) == 0 {
		t.Fatal("no link message seen")
	}
}

// TestBusKeyBrokersWithAnotherKeyOrNoneStayApart: a broker with another
// key, or none, is not part of the bus: each side refuses the other's
// messages, and neither lists the other's nodes.
func TestBusKeyBrokersWithAnotherKeyOrNoneStayApart(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys [][]byte
	}{
		{"another key", [][]byte{busKeyA, busKeyB}},
		{"no key", [][]byte{busKeyA, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := keyedBus(t, false, tc.keys...)
			b1, b2 := u.brokers[0], u.brokers[1]
			connect(t, b1, "alpha")
			connect(t, b2, "beta")
			// b1 refuses b2's heartbeat shares: it has heard b2, and not
			// taken it.
			awaitRefused(t, b1, 0, 2, "b2's shares")
			awaitRefused(t, b2, 0, 2, "b1's shares") // without a key, b2 counts them too
			for _, e := range u.brokers {
				for _, n := range e.Broker.Directory() {
					if n.Broker != e.Broker.Name() {
						t.Fatalf("%s lists %s of %s", e.Broker.Name(), n.Node, n.Broker)
					}
				}
			}
			t.Logf("refused by the key: b1 %d, b2 %d", refusedByKey(b1), refusedByKey(b2))
		})
	}
}
