package broker_test

// The durable relay's inboxes through any broker of a bus
// (docs/cluster.md#durable-inboxes): three brokers on a three-server NATS
// cluster, each device's inbox on its home among the relay brokers,
// pushed to, received from and acked through any broker.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

const relayBusLease = 3 * time.Second

// relayBus is three brokers b1..b3 whose relay stores are under dir, with
// relays as the bus's relay brokers.
type relayBus struct {
	nats    *testnats.Cluster
	dir     string
	relays  []string
	brokers []*testbroker.Env
	relay   relay.Options // every broker's store options
	key     []byte        // every broker's bus key (sealed), or nil
}

func startRelayBus(t testing.TB, relays ...string) *relayBus {
	return startRelayBusWith(t, relay.Options{}, relays...)
}

func startRelayBusWith(t testing.TB, ro relay.Options, relays ...string) *relayBus {
	t.Helper()
	u := &relayBus{nats: testnats.Start(t, 3), dir: t.TempDir(), relays: relays, relay: ro}
	for i := range 3 {
		u.brokers = append(u.brokers, u.start(t, i))
	}
	awaitPeers(t, u.brokers)
	return u
}

// start runs broker b<i+1> on NATS server i, on its own relay directory
// (the same one on a restart).
func (u *relayBus) start(t testing.TB, i int) *testbroker.Env {
	t.Helper()
	opts := testOpts()
	opts.Name = fmt.Sprintf("b%d", i+1)
	opts.Relay = u.relay
	opts.RelayDir = filepath.Join(u.dir, opts.Name)
	// A longer lease than the fault tests': these tests stop brokers only
	// cleanly (a goodbye), and a lease run out under load would fail the
	// pushes in flight (UNAVAILABLE), as it should, but not as the test means.
	opts.Cluster = broker.ClusterOptions{URLs: []string{u.nats.URL(i)}, Heartbeat: busHeartbeat, Lease: relayBusLease, Relays: u.relays,
		BusKey: u.key, SealPayloads: u.key != nil}
	return testbroker.Start(t, "tcp", opts)
}

// awaitPeers waits until every broker lists a node of every other: the
// brokers know each other.
func awaitPeers(t testing.TB, envs []*testbroker.Env) {
	t.Helper()
	want := map[string]string{}
	for _, e := range envs {
		name := "probe-" + e.Broker.Name()
		connect(t, e, name)
		want[name] = e.Broker.Name()
	}
	for _, e := range envs {
		testbroker.Await(t, busSettle, e.Broker.Name()+" knows the bus", func() error {
			got := where(e)
			for n, b := range want {
				if got[n] != b {
					return fmt.Errorf("%s lists %v", e.Broker.Name(), got)
				}
			}
			return nil
		})
	}
}

// pushAll pushes n blobs from author to dev through c, pipelined, and
// checks that each is stored.
func pushAll(t *testing.T, c *client.Client, author, dev *seal.Identity, first, n int) {
	t.Helper()
	blobs := make([][]byte, n)
	for i := range blobs {
		blobs[i] = sealedTo(t, author, dev, fmt.Sprint("hello ", first+i))
	}
	for i, p := range c.DurablePushAll(ctxT(t, 20*time.Second), blobs) {
		if p.Err != nil {
			t.Fatalf("push %d: %v", first+i, p.Err)
		}
	}
}

// receiveInOrder opens dev's session through c and checks that it
// delivers the blobs from author numbered first..last, in order; it acks
// the first ack of them and returns the session.
func receiveInOrder(t *testing.T, c *client.Client, author, dev *seal.Identity, first, last, ack int) *client.DurableSession {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	s, err := c.DurableReceive(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	senders := seal.SendersFunc(func(string, seal.DeviceID) (seal.Public, bool) { return author.Public(), true })
	var seqs []uint64
	for i := first; i <= last; i++ {
		b, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("blob %d: %v", i, err)
		}
		in, err := seal.Open(dev, b.Blob, senders)
		if err != nil || string(in.Body) != fmt.Sprint("hello ", i) {
			t.Fatalf("blob %d opens to %q, %v", i, in.Body, err)
		}
		if i-first < ack {
			seqs = append(seqs, b.Seq)
		}
	}
	if err := s.AckAll(ctx, seqs); err != nil {
		t.Fatal(err)
	}
	return s
}

// awaitInbox waits until dev's inbox, asked through c, holds blobs.
func awaitInbox(t *testing.T, c *client.Client, dev *seal.Identity, blobs int) {
	t.Helper()
	testbroker.Await(t, busSettle, "the inbox", func() error {
		in, err := c.DurableInbox(ctxT(t, 5*time.Second), dev)
		if err != nil {
			return err
		}
		if in.Blobs != blobs {
			return fmt.Errorf("the inbox holds %d blobs, want %d", in.Blobs, blobs)
		}
		return nil
	})
}

// TestBusDurableInboxFromAnyBroker: with every broker a relay, devices
// whose inboxes live on any of them are pushed to through b1 and received
// from through b2, in order, each blob once a session; what is acked
// through b2 is gone when b3 is asked, what is not comes again on the
// next session.
func TestBusDurableInboxFromAnyBroker(t *testing.T) {
	u := startRelayBus(t, "b1", "b2", "b3")
	author := identity(t)
	sender := connect(t, u.brokers[0], "sender")
	const n = 40
	for d := range 6 { // six devices: their homes spread over the three
		dev := identity(t)
		pushAll(t, sender, author, dev, 0, n)
		rx := connect(t, u.brokers[1], fmt.Sprint("rx", d))
		s := receiveInOrder(t, rx, author, dev, 0, n-1, n/2)
		s.Close()
		awaitInbox(t, connect(t, u.brokers[2], fmt.Sprint("ask", d)), dev, n/2)
		// A new session (another connection, another broker) starts at
		// the oldest blob not acked.
		receiveInOrder(t, connect(t, u.brokers[0], fmt.Sprint("rx-again", d)), author, dev, n/2, n-1, n/2)
		awaitInbox(t, rx, dev, 0)
	}
}

// pushedThroughB1 starts a relay bus whose one relay is home, and pushes
// n blobs from author to dev through sender, a node on b1.
func pushedThroughB1(t *testing.T, home string, n int) (u *relayBus, sender *client.Client, author, dev *seal.Identity) {
	t.Helper()
	u = startRelayBus(t, home)
	author, dev = identity(t), identity(t)
	sender = connect(t, u.brokers[0], "sender")
	pushAll(t, sender, author, dev, 0, n)
	return u, sender, author, dev
}

// TestBusDurableHomeRestartLosesNothingAcknowledged: every answered push
// is in the home's store when it comes back; while it is away, pushes
// for its devices are refused UNAVAILABLE (the sender keeps them), and
// sessions through another broker see every blob not acked, in order.
func TestBusDurableHomeRestartLosesNothingAcknowledged(t *testing.T) {
	u, sender, author, dev := pushedThroughB1(t, "b2", 30)
	rx := connect(t, u.brokers[2], "rx")
	receiveInOrder(t, rx, author, dev, 0, 29, 10).Close()

	ctx := ctxT(t, 20*time.Second)
	if err := u.brokers[1].Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	testbroker.Await(t, busSettle, "a push refused while the home is away", func() error {
		_, err := sender.DurablePush(ctx, sealedTo(t, author, dev, "while away"))
		var re *client.RequestError
		if !errors.As(err, &re) || re.Kind != wire.ResultUnavailable {
			return fmt.Errorf("push: %v, want UNAVAILABLE", err)
		}
		return nil
	})
	u.brokers[1] = u.start(t, 1)
	awaitPeers(t, u.brokers)
	pushAll(t, sender, author, dev, 30, 10)
	receiveInOrder(t, connect(t, u.brokers[0], "rx-again"), author, dev, 10, 39, 30)
	awaitInbox(t, rx, dev, 0)
}

// TestBusDurableNewerSessionThroughAnotherBroker: a newer session of a
// device, opened through another broker, ends the older one at the home
// and takes over: the older receiver is told (through the broker that
// forwards it), the newer gets what was not acked, then what is pushed
// next, and its acks without answers reach the home too.
func TestBusDurableNewerSessionThroughAnotherBroker(t *testing.T) {
	u, sender, author, dev := pushedThroughB1(t, "b3", 3)
	older := receiveInOrder(t, connect(t, u.brokers[0], "first"), author, dev, 0, 2, 0)
	s := receiveInOrder(t, connect(t, u.brokers[1], "second"), author, dev, 0, 2, 3)
	if _, err := older.Next(ctxT(t, 20*time.Second)); !errors.Is(err, client.ErrDurableTakenOver) {
		t.Fatalf("the older session's Next: %v, want ErrDurableTakenOver", err)
	}
	pushAll(t, sender, author, dev, 3, 1)
	b, err := s.Next(ctxT(t, 20*time.Second))
	if err != nil || b.Seq != 4 {
		t.Fatalf("the newer session's next blob: %+v, %v", b, err)
	}
	awaitInbox(t, sender, dev, 1)
	if err := s.AckAllNoWait([]uint64{b.Seq}); err != nil { // an ack as an event, forwarded too
		t.Fatal(err)
	}
	awaitInbox(t, sender, dev, 0)
}

// fakeHome is a NATS connection that speaks on the bus as broker bx:
// its share keeps it on the bus (republished until the test ends), and
// what the brokers forward to it arrives on got.
type fakeHome struct {
	nc  *nats.Conn
	got chan *nats.Msg
}

func startFakeHome(t *testing.T, url string) *fakeHome {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHome{nc: nc, got: make(chan *nats.Msg, 64)}
	if _, err := nc.ChanSubscribe("busbar.relay.bx.*", h.got); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(busHeartbeat)
		defer tick.Stop()
		for gen := 1; ; gen++ {
			_ = nc.Publish("busbar.dir.bx", fmt.Appendf(nil, `{"broker":"bx","iid":"fake","gen":%d,"part":0,"parts":1,"nodes":[{"node":"fakenode"}]}`, gen))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		nc.Close()
	})
	return h
}

// next is the next command forwarded to the fake home.
func (h *fakeHome) next(t *testing.T) *nats.Msg {
	t.Helper()
	select {
	case m := <-h.got:
		return m
	case <-time.After(busSettle):
		t.Fatal("nothing forwarded to the fake home")
		return nil
	}
}

// TestBusDurableHomeThatDoesNotAnswer: a forwarded push is answered as its
// home answers it while the home answers within RelayTimeout; past it the
// broker answers UNAVAILABLE itself.
func TestBusDurableHomeThatDoesNotAnswer(t *testing.T) {
	nc := testnats.Start(t, 1)
	opts := testOpts()
	opts.Name = "b1"
	opts.Cluster = broker.ClusterOptions{URLs: nc.URLs(), Heartbeat: busHeartbeat, Lease: busLease, Relays: []string{"bx"}, RelayTimeout: 300 * time.Millisecond}
	e := testbroker.Start(t, "tcp", opts)
	home := startFakeHome(t, nc.URL(0))
	sender := connect(t, e, "sender")
	author, dev := identity(t), identity(t)
	ctx := ctxT(t, 20*time.Second)
	testbroker.Eventually(t, busSettle, "the fake home on the bus", func() bool { return where(e)["fakenode"] == "bx" })

	answered := make(chan error, 1)
	go func() {
		_, err := sender.DurablePush(ctx, sealedTo(t, author, dev, "answered"))
		answered <- err
	}()
	m := home.next(t)
	if m.Header.Get("op") != "push" || m.Header.Get("device") != dev.ID().String() {
		t.Fatalf("forwarded: %v", m.Header)
	}
	answer := nats.NewMsg("busbar.relayed.b1.bx")
	answer.Header.Set("op", "answer")
	answer.Header.Set("id", m.Header.Get("id"))
	answer.Data = []byte("7")
	if err := home.nc.PublishMsg(answer); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the push the home answered: %v", err)
	}

	start := time.Now()
	_, err := sender.DurablePush(ctx, sealedTo(t, author, dev, "never answered"))
	var re *client.RequestError
	if !errors.As(err, &re) || re.Kind != wire.ResultUnavailable || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("the push the home never answered: %v", err)
	}
	if took := time.Since(start); took < opts.Cluster.RelayTimeout {
		t.Fatalf("refused after %v, before RelayTimeout %v", took, opts.Cluster.RelayTimeout)
	}
}

// TestBusDurableForwardedSessionEndsOnADeliveryLostBetweenBrokers: a home
// numbers the blobs it sends a session opened through another broker
// (the "n" header); as for an edge protocol's session, a busbar device's
// session whose next blob does not follow the last (one lost between
// brokers: NATS core may drop a message) ends, the device is told
// (bus.durable.ended, "lost") and the home is told the session ended,
// rather than deliver the next blob ahead of the lost one. The home is a
// NATS client speaking the home's messages.
func TestBusDurableForwardedSessionEndsOnADeliveryLostBetweenBrokers(t *testing.T) {
	nc := testnats.Start(t, 1)
	opts := testOpts()
	opts.Name = "b1"
	opts.Cluster = broker.ClusterOptions{URLs: nc.URLs(), Heartbeat: busHeartbeat, Lease: busLease, Relays: []string{"bx"}}
	e := testbroker.Start(t, "tcp", opts)
	home := startFakeHome(t, nc.URL(0))
	receiver := connect(t, e, "receiver")
	dev := identity(t)
	ctx := ctxT(t, 20*time.Second)
	testbroker.Eventually(t, busSettle, "the fake home on the bus", func() bool { return where(e)["fakenode"] == "bx" })

	type opened struct {
		s   *client.DurableSession
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := receiver.DurableReceive(ctx, dev)
		ch <- opened{s, err}
	}()
	m := home.next(t)
	if m.Header.Get("op") != "receive" || m.Header.Get("device") != dev.ID().String() {
		t.Fatalf("forwarded: %v", m.Header)
	}
	sid := m.Header.Get("sid")
	send := func(kv ...string) {
		t.Helper()
		msg := nats.NewMsg("busbar.relayed.b1.bx")
		for i := 0; i+1 < len(kv); i += 2 {
			msg.Header.Set(kv[i], kv[i+1])
		}
		if kv[1] == "deliver" {
			msg.Data = []byte("blob " + kv[len(kv)-1])
		}
		if err := home.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	send("op", "answer", "id", m.Header.Get("id"))
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	send("op", "deliver", "sid", sid, "seq", "10", "n", "1")
	if b, err := o.s.Next(ctx); err != nil || b.Seq != 10 || string(b.Blob) != "blob 1" {
		t.Fatalf("the first blob: %v %q %v", b.Seq, b.Blob, err)
	}
	send("op", "deliver", "sid", sid, "seq", "12", "n", "3") // number 2 lost
	b, err := o.s.Next(ctx)
	if err == nil {
		t.Fatalf("got blob %d %q past a lost one, want the session ended", b.Seq, b.Blob)
	}
	if !errors.Is(err, client.ErrDurableSession) || !strings.Contains(err.Error(), wire.DurableEndedLost) {
		t.Fatalf("the session ended with %v, want ErrDurableSession, %q", err, wire.DurableEndedLost)
	}
	if m := home.next(t); m.Header.Get("op") != "end" || m.Header.Get("sid") != sid {
		t.Fatalf("after the session: %v", m.Header)
	}
}

// TestBusDurableForwardedPipelineRefusesAGap: a home takes a forwarded
// connection's pipelined pushes only in the order they were numbered: one
// that follows a push it never saw (lost between brokers) is refused
// UNAVAILABLE, and the rest of that pipeline with it, until the sender
// starts a new pipeline.
func TestBusDurableForwardedPipelineRefusesAGap(t *testing.T) {
	nc := testnats.Start(t, 1)
	opts := testOpts()
	opts.Name = "b1"
	opts.RelayDir = t.TempDir()
	opts.Cluster = broker.ClusterOptions{URLs: nc.URLs(), Heartbeat: busHeartbeat, Lease: busLease, Relays: []string{"b1"}}
	testbroker.Start(t, "tcp", opts)
	bx, err := nats.Connect(nc.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bx.Close()
	answers, err := bx.SubscribeSync("busbar.relayed.bx.b1")
	if err != nil {
		t.Fatal(err)
	}
	author, dev := identity(t), identity(t)
	for i, step := range []struct {
		n          int
		pipe, want string
	}{
		{1, wire.PipelineFirst, ""},
		{2, wire.PipelineNext, ""},
		{4, wire.PipelineNext, string(wire.ResultUnavailable)}, // 3 was lost
		{5, wire.PipelineNext, string(wire.ResultUnavailable)}, // behind the refused one
		{6, wire.PipelineFirst, ""},                            // the sender starts again
		{7, wire.PipelineNext, ""},
	} {
		m := nats.NewMsg("busbar.relay.b1.bx")
		for k, v := range map[string]string{"op": "push", "id": fmt.Sprint(i), "conn": "c1", "n": fmt.Sprint(step.n), "pipe": step.pipe, "device": dev.ID().String()} {
			m.Header.Set(k, v)
		}
		m.Data = sealedTo(t, author, dev, fmt.Sprint("push ", step.n))
		if err := bx.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		a, err := answers.NextMsg(busSettle)
		if err != nil {
			t.Fatal(err)
		}
		if a.Header.Get("id") != fmt.Sprint(i) || a.Header.Get("rc") != step.want {
			t.Fatalf("push %d: answer %v %q, want rc %q", step.n, a.Header, a.Data, step.want)
		}
	}
}

// TestBusDurablePushOverTheNATSPayloadIsTooLarge: a push forwarded to its
// home may be NATS's max_payload less ClusterRelayHeaderRoom (and less
// the bus key's room, with one); one byte more is refused TOO_LARGE
// (permanent) by the forwarding broker.
func TestBusDurablePushOverTheNATSPayloadIsTooLarge(t *testing.T) {
	t.Run("no key", func(t *testing.T) { durablePushOverTheNATSPayload(t, nil, 0) })
	t.Run("sealed bus key", func(t *testing.T) {
		durablePushOverTheNATSPayload(t, busKeyA, broker.BusKeyRoom(broker.DefaultClusterSubjectPrefix))
	})
}

func durablePushOverTheNATSPayload(t *testing.T, key []byte, room int) {
	const maxPayload = 16 << 10
	nc := testnats.Start(t, 3, func(o *server.Options) { o.MaxPayload = maxPayload })
	u := &relayBus{nats: nc, dir: t.TempDir(), relays: []string{"b2"}, key: key}
	u.brokers = []*testbroker.Env{u.start(t, 0), u.start(t, 1)}
	awaitPeers(t, u.brokers)
	sender := connect(t, u.brokers[0], "sender")
	author, dev := identity(t), identity(t)
	limit := maxPayload - broker.ClusterRelayHeaderRoom - room
	overhead := len(sealedTo(t, author, dev, ""))
	ctx := ctxT(t, 20*time.Second)
	at := sealedTo(t, author, dev, strings.Repeat("x", limit-overhead))
	if len(at) != limit {
		t.Fatalf("a blob of %d bytes, want %d", len(at), limit)
	}
	if _, err := sender.DurablePush(ctx, at); err != nil {
		t.Fatalf("a push of %d bytes: %v", len(at), err)
	}
	_, err := sender.DurablePush(ctx, sealedTo(t, author, dev, strings.Repeat("x", limit-overhead+1)))
	if !client.DurablePermanent(err) || !strings.Contains(err.Error(), string(wire.ResultTooLarge)) {
		t.Fatalf("a push of %d bytes: %v, want TOO_LARGE", limit+1, err)
	}
}

// benchDurablePush pushes b.N sealed blobs of 128 bytes, pipelined, from
// a node on broker from to inboxes whose home is b2 (from 1: on the home
// itself; from 0: forwarded), spread over 64 devices, without the push
// rate limit.
func benchDurablePush(b *testing.B, from int) {
	u := startRelayBusWith(b, relay.Options{MaxPushRate: -1}, "b2")
	sender := connect(b, u.brokers[from], "sender")
	author := identity(b)
	blobs := make([][]byte, 64)
	for i := range blobs {
		blobs[i] = sealedTo(b, author, identity(b), strings.Repeat("x", 128))
	}
	ctx := ctxT(b, 5*time.Minute)
	p := sender.DurablePipe()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if p.Len() == client.DurablePipeWindow {
			if _, err := p.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Send(ctx, blobs[i%len(blobs)]); err != nil {
			b.Fatal(err)
		}
	}
	for p.Len() > 0 {
		if _, err := p.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDurablePushOnItsHome: the sender is on the inboxes' home.
func BenchmarkDurablePushOnItsHome(b *testing.B) { benchDurablePush(b, 1) }

// BenchmarkDurablePushThroughAnotherBroker: the sender's broker forwards
// every push to the home.
func BenchmarkDurablePushThroughAnotherBroker(b *testing.B) { benchDurablePush(b, 0) }

// TestBusDurableHomeChecksForwardedBlobs: the home of an inbox checks a
// forwarded push's sealed header itself (sizes, versions, recipients no
// sealing produces), whoever forwarded it: pushes sent on the bus by a
// NATS client in b1's name, of a blob cut below the least sealed size and
// of one of version 0, are answered MALFORMED and nothing is stored.
func TestBusDurableHomeChecksForwardedBlobs(t *testing.T) {
	u := startRelayBus(t, "b2")
	home := u.brokers[1]
	nc, answers := asB1(t, u, 4)
	author, dev := identity(t), identity(t)
	for i, blob := range [][]byte{
		sealedTo(t, author, dev, "")[:seal.MinSealedSize-1],
		func() []byte { // version 0
			b := sealedTo(t, author, dev, "x")
			b[4], b[5] = 0, 0
			return b
		}(),
	} {
		id := fmt.Sprint(i + 1)
		msg := &nats.Msg{Subject: "busbar.relay.b2.b1", Data: blob, Header: nats.Header{}}
		for k, v := range map[string]string{"op": "push", "id": id, "device": dev.Public().ID().String(), "conn": "c1", "n": id} {
			msg.Header.Set(k, v)
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-answers:
			if a.Header.Get("id") != id || a.Header.Get("rc") != string(wire.ResultMalformed) {
				t.Fatalf("push %s answered %v %q", id, a.Header, a.Data)
			}
			t.Logf("push %s: %s %s", id, a.Header.Get("rc"), a.Header.Get("text"))
		case <-time.After(busSettle):
			t.Fatalf("push %s not answered", id)
		}
	}
	if st, _ := home.Broker.RelayStats(); st.Blobs != 0 || st.Pushes != 0 {
		t.Fatalf("the home stored %d blobs", st.Blobs)
	}
}

// asB1 is a NATS client speaking on the bus in b1's name, as an attacker
// with NATS access would, with the answers b2 sends b1 (up to capacity
// buffered). Closed with the test.
func asB1(t *testing.T, u *relayBus, capacity int) (*nats.Conn, chan *nats.Msg) {
	t.Helper()
	nc, err := nats.Connect(u.nats.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	answers := make(chan *nats.Msg, capacity)
	if _, err := nc.ChanSubscribe("busbar.relayed.b1.b2", answers); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, answers
}
