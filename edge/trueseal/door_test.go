package trueseal

// The trueseal door under the floods measured from outside
// (docs/trueseal.md#what-an-anonymous-pusher-can-make-the-relay-hold):
// idle connections before their handshake, idle sessions after it,
// anonymous pushes to made-up inboxes, one address pushing fast; and the
// shared door: accept failures retried, refusals through its log. Real
// listeners, real TCP sockets; the limits scaled down, the mechanisms
// those of busbar serve.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/edge"
	"busbar/edge/edgetest"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/relay"
	"busbar/seal"
)

// doorRelay is a broker with a relay store and a trueseal server on it,
// given the broker's door as busbar serve gives it.
type doorRelay struct {
	env  *testbroker.Env
	srv  *Server
	addr string
	key  []byte
	logs *edgetest.LogBuffer
}

func startDoorRelay(t *testing.T, bopts broker.Options, opts Options) *doorRelay {
	t.Helper()
	logs := &edgetest.LogBuffer{}
	bopts.RelayDir = t.TempDir()
	bopts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env := testbroker.Start(t, "tcp", bopts)
	inboxes, err := BusInboxes(env.Broker)
	if err != nil {
		t.Fatal(err)
	}
	k := newDevice(t)
	opts.Key, opts.Store, opts.Inboxes, opts.Door = k, env.Broker.RelayStore(), inboxes, env.Broker.Door()
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { // before the broker's cleanup: the store outlives the sessions
		srv.Close()
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return &doorRelay{env: env, srv: srv, addr: ln.Addr().String(), key: k.Public, logs: logs}
}

// pushOnce pushes one blob on a new push session and reports whether it
// was acked; the session is closed after.
func pushOnce(t *testing.T, addr string, relayPub, to []byte, env string) bool {
	t.Helper()
	cl, err := tryPushSession(t, addr, relayPub)
	if err != nil {
		return false
	}
	defer cl.c.Close()
	cl.push(to, []byte(env))
	typ, _, err := cl.read()
	return err == nil && typ == Ack
}

// Idle connections that never start a handshake hold places in the
// broker's login pool (Door.Hold), bounded and evicted by its rules, and
// no session place: every legitimate push gets through while the flood
// is held. Before, they counted against MaxSessions, and 11,000 of them
// let 16 pushes of 56 through.
func TestIdleConnectionsBeforeTheHandshakeHoldTheDoorsPlacesNotSessions(t *testing.T) {
	const maxHandshakes, maxSessions, flood, pushes = 8, 4, 64, 20
	d := startDoorRelay(t, broker.Options{MaxHandshakes: maxHandshakes, MaxHandshakesPerAddr: maxHandshakes,
		HandshakeGrace: -1}, // any place may make room at once: the flood is all older than the pushes
		Options{MaxSessions: maxSessions})
	for range flood {
		dial(t, d.addr) // held open, silent, until the test ends
	}
	checkFor(t, "every idle connection is taken or refused, and the pool holds at most its bound of them", func() bool {
		st := d.srv.Stats()
		return st.Accepted+st.SessionsRefused == flood && st.Handshakes <= maxHandshakes
	})
	if st := d.srv.Stats(); st.Sessions != 0 || st.SessionsRefused != 0 {
		t.Fatalf("the idle connections took sessions: %+v", st)
	}
	dev := newDevice(t)
	for i := range pushes {
		if !pushOnce(t, d.addr, d.key, dev.Public, fmt.Sprint("legit ", i)) {
			t.Fatalf("legitimate push %d of %d was not acked while %d idle connections are held", i+1, pushes, flood)
		}
		if st := d.srv.Stats(); st.Handshakes > maxHandshakes {
			t.Fatalf("%d connections in their handshake, past the pool's %d", st.Handshakes, maxHandshakes)
		}
	}
	if in := d.env.Broker.RelayStore().Inbox(DeviceID(dev.Public)); in.Blobs != pushes {
		t.Fatalf("the inbox holds %d blobs, want %d", in.Blobs, pushes)
	}
}

// Sessions whose handshake is done but which push and receive nothing
// are the first to make room at MaxSessions: every legitimate push gets
// through while they are held. Before, 10,500 of them let 5 pushes of 39
// through.
func TestIdleSessionsAfterTheHandshakeMakeRoomForPushes(t *testing.T) {
	const maxSessions, flood, pushes = 4, 16, 12
	f := start(t, Options{MaxSessions: maxSessions, FirstFrameTimeout: time.Hour}, relay.Options{})
	for range flood {
		pushSession(t, f.addr, f.key.Public) // handshake done, nothing pushed; held open
	}
	checkFor(t, "the idle sessions fill MaxSessions, the oldest made room for the newest", func() bool {
		st := f.srv.Stats()
		return st.Sessions == maxSessions && st.Evicted == flood-maxSessions
	})
	dev := newDevice(t)
	for i := range pushes {
		cl := pushSession(t, f.addr, f.key.Public)
		cl.push(dev.Public, []byte(fmt.Sprint("legit ", i)))
		cl.expect(Ack)
		cl.c.Close()
		// The first push made room by closing the oldest idle session;
		// the rest find the place the one before left.
		checkFor(t, "the pusher's session ended", func() bool { return f.srv.Stats().Sessions == maxSessions-1 })
	}
	st := f.srv.Stats()
	if st.SessionsRefused != 0 || st.Evicted != flood-maxSessions+1 || st.Unused != 0 {
		t.Fatalf("refused %d, evicted %d, unused %d (want 0, %d, 0)", st.SessionsRefused, st.Evicted, st.Unused, flood-maxSessions+1)
	}
	if in := f.store.Inbox(DeviceID(dev.Public)); in.Blobs != pushes {
		t.Fatalf("the inbox holds %d blobs, want %d", in.Blobs, pushes)
	}
}

// MaxSessions at its edge and one past it: at it, a session in use is
// never closed to make room, and the newcomer is refused; one unused
// makes room.
func TestMaxSessionsAtAndPastItsEdge(t *testing.T) {
	const maxSessions = 3
	f := start(t, Options{MaxSessions: maxSessions, FirstFrameTimeout: time.Hour}, relay.Options{})
	dev := newDevice(t)
	var used []*client
	for range maxSessions {
		cl := pushSession(t, f.addr, f.key.Public)
		cl.push(dev.Public, []byte("x"))
		cl.expect(Ack)
		used = append(used, cl)
	}
	if _, err := tryPushSession(t, f.addr, f.key.Public); err == nil {
		t.Fatal("a session past MaxSessions, all in use, was served")
	}
	if st := f.srv.Stats(); st.SessionsRefused != 1 || st.Evicted != 0 || st.Sessions != maxSessions {
		t.Fatalf("%+v", st)
	}
	used[0].c.Close()
	checkFor(t, "a place is free", func() bool { return f.srv.Stats().Sessions == maxSessions-1 })
	idle := pushSession(t, f.addr, f.key.Public) // at the edge again, one unused
	late := pushSession(t, f.addr, f.key.Public) // past it: the unused one makes room
	late.push(dev.Public, []byte("y"))
	late.expect(Ack)
	idle.expectEnd()
	if st := f.srv.Stats(); st.Evicted != 1 || st.SessionsRefused != 1 {
		t.Fatalf("%+v", st)
	}
}

// A session from which no frame comes within FirstFrameTimeout of its
// handshake is closed as unused, a silent receive session after the
// Heartbeat the relay sends it at half that time; a receive session whose
// device sends a frame stays, and gets what is pushed to it later. (The
// live device writes at once rather than answering the relay's Heartbeat,
// so that a busy machine cannot make it late.)
func TestSessionsThatSayNothingAfterTheHandshakeAreClosed(t *testing.T) {
	f := start(t, Options{FirstFrameTimeout: 4 * time.Second, HeartbeatInterval: time.Hour, IdleTimeout: time.Hour}, relay.Options{})
	dev := newDevice(t)
	live := receiveSession(t, f.addr, f.key.Public, dev)
	live.write(Heartbeat, nil) // a first frame: the session is in use
	live.expect(Heartbeat)     // the echo
	silent := receiveSession(t, f.addr, f.key.Public, newDevice(t))
	checkFor(t, "both receive sessions are up", func() bool { return f.srv.Stats().ReceiveSessions == 2 })
	pusher := pushSession(t, f.addr, f.key.Public) // its deadline is after both receive sessions'
	silent.expect(Heartbeat)
	pusher.expectEnd()
	silent.expectEnd()
	checkFor(t, "both are counted unused", func() bool { return f.srv.Stats().Unused == 2 })
	// live's deadline is past (the pusher's, later, is): it is open.
	if _, err := f.store.Push(t.Context(), DeviceID(dev.Public), []byte("later")); err != nil {
		t.Fatal(err)
	}
	if _, env := live.deliver(); string(env) != "later" {
		t.Fatalf("delivered %q", env)
	}
	if st := f.srv.Stats(); st.Unused != 2 || st.Idle != 0 || st.ReceiveSessions != 1 {
		t.Fatalf("%+v", st)
	}
}

// One source address's receive sessions, each with a fresh key and each
// answering the relay's Heartbeat (in use: never closed to make room),
// hold at most MaxReceivePerSource places: at it they are all served, one
// past it is closed at the end of its handshake, while another address,
// and a push session from the same one, are served; a place given back
// is taken again. Before, only MaxSessions bounded them.
func TestReceiveSessionsPerSourceAtAndPastTheirShare(t *testing.T) {
	const share = 3
	f := start(t, Options{MaxReceivePerSource: share, FirstFrameTimeout: time.Hour, HeartbeatInterval: time.Hour, IdleTimeout: time.Hour}, relay.Options{})
	var held []*client
	for range share {
		r := receiveSessionOn(t, dialFrom(t, "127.0.0.1", f.addr), f.key.Public, newDevice(t))
		r.write(Heartbeat, nil) // in use, as a live device is
		r.expect(Heartbeat)     // the echo: the session is served
		held = append(held, r)
	}
	past := receiveSessionOn(t, dialFrom(t, "127.0.0.1", f.addr), f.key.Public, newDevice(t))
	past.expectEnd()
	if st := f.srv.Stats(); st.SourceSessionsRefused != 1 || st.ReceiveSessions != share || st.SessionsRefused != 0 || st.Evicted != 0 {
		t.Fatalf("%+v", st)
	}
	other := receiveSessionOn(t, dialFrom(t, "127.0.0.2", f.addr), f.key.Public, newDevice(t))
	other.write(Heartbeat, nil)
	other.expect(Heartbeat)
	dev := newDevice(t)
	if !pushOnce(t, f.addr, f.key.Public, dev.Public, "a push from the full address") {
		t.Fatal("a push session from the address at its receive share was not served")
	}
	held[0].c.Close()
	checkFor(t, "the place is given back", func() bool { return f.srv.Stats().ReceiveSessions == share })
	again := receiveSessionOn(t, dialFrom(t, "127.0.0.1", f.addr), f.key.Public, dev)
	if _, env := again.deliver(); string(env) != "a push from the full address" {
		t.Fatalf("delivered %q", env)
	}
	if st := f.srv.Stats(); st.SourceSessionsRefused != 1 {
		t.Fatalf("%+v", st)
	}
}

// A negative MaxReceivePerSource turns the share off: one address holds
// as many receive sessions as MaxSessions lets it.
func TestReceiveSessionsPerSourceShareOff(t *testing.T) {
	const n = 4
	f := start(t, Options{MaxReceivePerSource: -1, MaxSessions: n, FirstFrameTimeout: time.Hour, HeartbeatInterval: time.Hour, IdleTimeout: time.Hour}, relay.Options{})
	for range n {
		r := receiveSession(t, f.addr, f.key.Public, newDevice(t))
		r.write(Heartbeat, nil)
		r.expect(Heartbeat)
	}
	if st := f.srv.Stats(); st.SourceSessionsRefused != 0 || st.ReceiveSessions != n {
		t.Fatalf("%+v", st)
	}
}

// dialFrom dials addr from the local address ip (a loopback address of
// its own: another source).
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// One source address's pushes: SourcePushBurst at once are acked, the
// next is refused for now (the session closes unacked, as for any
// temporary refusal), on a new session too; another address has a bucket
// of its own.
func TestSourcePushRateAtAndPastItsBurst(t *testing.T) {
	const burst = 3
	f := start(t, Options{SourcePushRate: 1e-6, SourcePushBurst: burst}, relay.Options{}) // no refill within the test
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	for range burst {
		p.push(dev.Public, []byte("x"))
	}
	for range burst {
		p.expect(Ack)
	}
	p.push(dev.Public, []byte("one past the burst"))
	p.expectEnd()
	again := pushSession(t, f.addr, f.key.Public)
	again.push(dev.Public, []byte("x"))
	again.expectEnd()
	other := &client{t: t, c: dialFrom(t, "127.0.0.2", f.addr)}
	hsPush(t, other, f.key.Public)
	other.push(dev.Public, []byte("from another address"))
	other.expect(Ack)
	if st := f.srv.Stats(); st.SourceRateLimited != 2 || st.Pushed != burst+1 {
		t.Fatalf("%+v", st)
	}
	if n := f.store.Inbox(DeviceID(dev.Public)).Blobs; n != burst+1 {
		t.Fatalf("the inbox holds %d blobs", n)
	}
}

func TestSourceBucketsAreBoundedAndIPv6CountsBySlash64(t *testing.T) {
	l := newSourceLimiter(1e-6, 1)
	l.max = 2
	now := time.Now()
	for _, a := range []string{"192.0.2.1", "192.0.2.2"} { // a bucket each, at the bound
		if !l.take(a, now) || l.take(a, now) {
			t.Fatalf("%s: not a bucket of 1", a)
		}
	}
	// Past the bound, every new address shares one bucket.
	if !l.take("192.0.2.3", now) || l.take("192.0.2.4", now) || len(l.buckets) != 2 {
		t.Fatalf("past MaxPushSources: %d buckets", len(l.buckets))
	}
	// Two addresses of one /64 are one source; ::ffff:v4 is the v4 one.
	if sourceKey("2001:db8:1:2::1") != sourceKey("2001:db8:1:2:ffff::9") || sourceKey("2001:db8:1:3::1") == sourceKey("2001:db8:1:2::1") ||
		sourceKey("::ffff:192.0.2.1") != "192.0.2.1" || sourceKey("pipe") != "pipe" {
		t.Fatal("source keys")
	}
	off := newSourceLimiter(-1, 1)
	if first, second := off.take("x", now), off.take("x", now); !first || !second {
		t.Fatal("a negative rate is no limit")
	}
	if DefaultSourcePushRate <= 0 || DefaultSourcePushBurst < DefaultSourcePushRate || MaxPushSources <= 0 {
		t.Fatal("defaults")
	}
}

func sealed(t *testing.T, to *seal.Identity, body string) []byte {
	t.Helper()
	author, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
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

// Anonymous trueseal pushes to made-up inboxes until trueseal's budget
// refuses every new one: busbar's own durable sends are still accepted,
// and trueseal's limits refuse a new trueseal device. Before, the two
// shared one budget, and such a flood (10,000 inboxes, 1 GB in 91 s)
// refused the owner's durable sends INBOX_FULL.
func TestTruesealFloodLeavesBusbarsDurableSendsAccepted(t *testing.T) {
	const edgeInboxes = 6
	d := startDoorRelay(t, broker.Options{Relay: relay.Options{MaxInboxes: 4,
		Edge: relay.Budget{MaxInboxes: edgeInboxes, MaxStoreBytes: 64 << 10}}},
		Options{SourcePushRate: -1})
	taken, refusedInARow := 0, 0
	for i := 0; refusedInARow < 20; i++ {
		if pushOnce(t, d.addr, d.key, newDevice(t).Public, fmt.Sprint("flood ", i)) {
			taken, refusedInARow = taken+1, 0
		} else {
			refusedInARow++
		}
	}
	st := d.env.Broker.RelayStore().Stats()
	if taken != edgeInboxes || st.Edge.Inboxes != edgeInboxes {
		t.Fatalf("the flood got %d inboxes (%+v), trueseal's budget is %d", taken, st.Edge, edgeInboxes)
	}
	owner := testclient.Connect(t, d.env, "owner")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 4 { // busbar's own budget, whole: 4 devices
		dev, err := seal.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := owner.DurablePush(ctx, sealed(t, dev, fmt.Sprint("own ", i))); err != nil {
			t.Fatalf("busbar's durable send %d refused while trueseal's budget is full: %v", i, err)
		}
	}
	if pushOnce(t, d.addr, d.key, newDevice(t).Public, "a new trueseal device") {
		t.Fatal("a new trueseal inbox past trueseal's budget was taken")
	}
	if st := d.env.Broker.RelayStore().Stats(); st.Own.Inboxes != 4 || st.Edge.Inboxes != edgeInboxes {
		t.Fatalf("own %+v, edge %+v", st.Own, st.Edge)
	}
}

// Serve is the edge's accept loop: a temporary accept failure is retried,
// not the end of the listener.
func TestServeRetriesATemporaryAcceptFailure(t *testing.T) {
	dir := t.TempDir()
	st, err := relay.Open(dir+"/relay", relay.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := newDevice(t)
	srv, err := NewServer(Options{Key: k, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	before := edge.AcceptFailures()[DoorName]
	served := make(chan error, 1)
	go func() { served <- srv.Serve(edgetest.EMFILE(ln, 1)) }()
	defer func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	}()
	dev := newDevice(t)
	if !pushOnce(t, ln.Addr().String(), k.Public, dev.Public, "after EMFILE") {
		t.Fatal("no push acked after a temporary accept failure")
	}
	if n := edge.AcceptFailures()[DoorName]; n != before+1 {
		t.Fatalf("accept failures counted %d, want %d", n, before+1)
	}
}

// Every refusal a peer can cause goes through the door's refusal log,
// with its source address and no key: none is written to the door's
// other log.
func TestRefusalsAreLoggedThroughTheDoor(t *testing.T) {
	plain, refusals := &edgetest.LogBuffer{}, &edgetest.LogBuffer{}
	door := edge.Door{Log: slog.New(slog.NewTextHandler(plain, nil)),
		Refusals: edge.NewRefusalLog(slog.New(slog.NewTextHandler(refusals, nil)))}
	f := start(t, Options{Door: door, MaxSessions: 2, FirstFrameTimeout: time.Hour}, relay.Options{MaxBlobBytes: 4})
	dev := newDevice(t)

	bad := dial(t, f.addr) // not a handshake: 8 bytes in a Noise message
	writeMsg(t, bad, []byte("garbage!"))
	if _, err := readMsg(bad); err == nil {
		t.Fatal("the relay answered garbage")
	}
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, []byte("too large"))
	p.expect(Error)
	p.push(dev.Public, []byte("ok"))
	p.expect(Ack)
	p2 := pushSession(t, f.addr, f.key.Public)
	p2.push(dev.Public, []byte("ok"))
	p2.expect(Ack)
	if _, err := tryPushSession(t, f.addr, f.key.Public); err == nil { // past MaxSessions, both in use
		t.Fatal("a third session was served")
	}
	checkFor(t, "the refusals are logged", func() bool {
		w, _ := door.Refusals.Counts()
		return w == 3
	})
	got := string(refusals.Bytes())
	for _, want := range []string{"trueseal handshake failed", "trueseal push refused", "code=\"too large\"", "trueseal session refused", "remote=127.0.0.1"} {
		if !strings.Contains(got, want) {
			t.Errorf("the refusal log lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(plain.Bytes()), "trueseal") {
		t.Errorf("a refusal went to the door's other log:\n%s", plain.Bytes())
	}
	for _, secret := range []string{PublicKeyText(dev.Public), DeviceID(dev.Public), PublicKeyText(f.key.Public)} {
		if strings.Contains(got, secret) {
			t.Fatalf("the refusal log names a key: %s", got)
		}
	}
}
