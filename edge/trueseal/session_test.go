package trueseal

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"busbar/relay"
)

func TestPushIsAckedAfterItsFsyncAndDeliveredToTheRecipientsInbox(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	env := []byte("sealed-envelope-bytes")

	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, env)
	p.expect(Ack)
	// The Ack came after the group commit holding the push was synced:
	// the blob is counted on disk, nothing of it pending.
	if in := f.store.Inbox(DeviceID(dev.Public)); in.Blobs != 1 || in.Pending != 0 {
		t.Fatalf("after the Ack the inbox is %+v, want 1 blob on disk", in)
	}
	if st := f.store.Stats(); st.Fsyncs == 0 || st.Pushes != 1 {
		t.Fatalf("store: %d fsyncs, %d pushes", st.Fsyncs, st.Pushes)
	}

	r := receiveSession(t, f.addr, f.key.Public, dev)
	id, got := r.deliver()
	if !bytes.Equal(got, env) {
		t.Fatalf("delivered %q, want %q", got, env)
	}
	if id == 0 {
		t.Fatal("blob id 0")
	}
}

func TestDeviceOnlineGetsAPushAsItIsAcked(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	r := receiveSession(t, f.addr, f.key.Public, dev)
	checkFor(t, "the receive session is up", func() bool { return f.srv.Stats().ReceiveSessions == 1 })

	p := pushSession(t, f.addr, f.key.Public)
	for i := range 3 {
		p.push(dev.Public, []byte{'m', byte('0' + i)})
	}
	for range 3 {
		p.expect(Ack)
	}
	var last uint64
	for i := range 3 {
		id, env := r.deliver()
		if string(env) != string([]byte{'m', byte('0' + i)}) || id <= last {
			t.Fatalf("deliver %d: id %d env %q (after id %d)", i, id, env, last)
		}
		last = id
	}
}

func TestDeliverAckDeletesOnlyFromTheAckingDevicesInbox(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	a, b := newDevice(t), newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	p.push(a.Public, []byte("for-a"))
	p.push(b.Public, []byte("for-b"))
	p.expect(Ack)
	p.expect(Ack)

	ra := receiveSession(t, f.addr, f.key.Public, a)
	idA, _ := ra.deliver()
	rb := receiveSession(t, f.addr, f.key.Public, b)
	idB, _ := rb.deliver()

	rb.deliverAck(idA) // b acks a's blob: nothing happens
	rb.deliverAck(idB) // then its own, read after it on the same session
	checkFor(t, "b's own ack is applied", func() bool { return f.store.Inbox(DeviceID(b.Public)).Blobs == 0 })
	if n := f.store.Inbox(DeviceID(a.Public)).Blobs; n != 1 {
		t.Fatalf("a's inbox holds %d blobs after b acked a's blob id, want 1", n)
	}
	ra.deliverAck(idA)
	checkFor(t, "a's ack is applied", func() bool { return f.store.Inbox(DeviceID(a.Public)).Blobs == 0 })
	checkFor(t, "both acks that deleted are counted", func() bool { return f.srv.Stats().DeliverAcks == 2 })
}

func TestUnackedBlobIsRedeliveredOnANewSessionOnly(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, []byte("first"))
	p.expect(Ack)

	r1 := receiveSession(t, f.addr, f.key.Public, dev)
	id1, _ := r1.deliver()
	// Not acked. The next push reaches the same session, and the first
	// blob does not come again before it.
	p.push(dev.Public, []byte("second"))
	p.expect(Ack)
	id2, env := r1.deliver()
	if string(env) != "second" || id2 <= id1 {
		t.Fatalf("same session: got id %d %q, want the second blob", id2, env)
	}
	r1.deliverAck(id2)
	checkFor(t, "the second blob's ack is applied", func() bool { return f.store.Inbox(DeviceID(dev.Public)).Blobs == 1 })
	r1.c.Close() // the TCP connection drops before the first blob's ack

	r2 := receiveSession(t, f.addr, f.key.Public, dev)
	id, env := r2.deliver()
	if id != id1 || string(env) != "first" {
		t.Fatalf("new session: got id %d %q, want id %d \"first\"", id, env, id1)
	}
}

func TestErrorRefusesAPushForGoodAndTheSessionGoesOn(t *testing.T) {
	const limit = 100
	f := start(t, Options{}, relay.Options{MaxBlobBytes: limit})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)

	p.write(Push, make([]byte, KeyBytes-1)) // no whole recipient key: malformed
	p.expect(Error)
	p.push(dev.Public, nil) // an empty envelope: malformed
	p.expect(Error)
	p.push(dev.Public, make([]byte, limit+1)) // past the store's blob limit: too large
	p.expect(Error)
	p.push(dev.Public, make([]byte, limit)) // at it
	p.expect(Ack)
	if n := f.store.Inbox(DeviceID(dev.Public)).Blobs; n != 1 {
		t.Fatalf("inbox holds %d blobs, want the one acked", n)
	}
	if st := f.srv.Stats(); st.Refused != 3 || st.Pushed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// writeRaw encrypts the frame bytes p as they are, whatever their header
// says, and sends them as one transport message.
func (cl *client) writeRaw(p []byte) {
	cl.t.Helper()
	ct, err := cl.send.Encrypt(nil, nil, p)
	if err != nil {
		cl.t.Fatal(err)
	}
	writeMsg(cl.t, cl.c, ct)
}

// A Push whose length field claims more than its frame holds is dropped
// without an answer and the session goes on, as trueseal-relay's push
// loop does (its frame parse fails: the frame is skipped). Before, busbar
// answered it Error, and the client took that Error for its next push's.
func TestPushFrameWhoseLengthClaimsMoreThanItHoldsIsDroppedSilently(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	// 01 00000029: a Push of 41 bytes, holding 40 (the key and 8 bytes).
	lying := append([]byte{0x01, 0x00, 0x00, 0x00, 0x29}, dev.Public...)
	lying = append(lying, "envelope"...)
	p.writeRaw(lying)
	p.writeRaw(append([]byte{0x01, 0x00, 0x00, 0x00, 0x21}, append(append([]byte(nil), dev.Public...), 'x')...)) // a whole Push of 33 bytes
	p.expect(Ack)                                                                                                // the first answer is the whole push's
	p.push(dev.Public, []byte("y"))
	p.expect(Ack) // and nothing came between
	in := f.store.Inbox(DeviceID(dev.Public))
	if in.Blobs != 2 || in.Bytes != 2 {
		t.Fatalf("inbox %+v, want the two whole pushes only", in)
	}
	if st := f.srv.Stats(); st.Pushed != 2 || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A Push whose frame holds bytes past its length field is answered Error
// (Malformed): a deliberate difference (docs/trueseal.md#what-differs-from-trueseal-relay);
// trueseal-relay would store the first length bytes and Ack.
func TestPushFrameWhoseLengthClaimsLessThanItHoldsIsAnsweredError(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	// 01 00000027: a Push of 39 bytes, holding 40.
	p.writeRaw(append(append([]byte{0x01, 0x00, 0x00, 0x00, 0x27}, dev.Public...), "envelope"...))
	p.expect(Error)
	if n := f.store.Inbox(DeviceID(dev.Public)).Blobs; n != 0 {
		t.Fatalf("inbox holds %d blobs", n)
	}
}

func TestOtherFramesOnAPushSessionAreDropped(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	p.write(Heartbeat, nil)
	p.write(DeliverAck, make([]byte, 8))
	p.push(dev.Public, []byte("x"))
	p.expect(Ack) // the first answer is the push's
}

func TestTemporaryRefusalClosesThePushSessionUnacked(t *testing.T) {
	f := start(t, Options{}, relay.Options{Edge: relay.Budget{MaxInboxBlobs: 1}}) // trueseal inboxes count against the edge budget
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, []byte("fits"))
	p.expect(Ack)
	p.push(dev.Public, []byte("inbox full"))
	p.expectEnd() // no Ack, no Error: the client keeps it and pushes it again later
	if n := f.store.Inbox(DeviceID(dev.Public)).Blobs; n != 1 {
		t.Fatalf("inbox holds %d blobs, want 1", n)
	}
}

func TestPushesArePipelinedAndAnsweredInOrder(t *testing.T) {
	f := start(t, Options{MaxPushesInFlight: 2}, relay.Options{MaxBlobBytes: 10})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	want := []Type{Ack, Error, Ack, Error, Ack}
	for _, w := range want {
		if w == Ack {
			p.push(dev.Public, []byte("ok"))
		} else {
			p.push(dev.Public, make([]byte, 11))
		}
	}
	for i, w := range want {
		if got := p.expect(w); len(got) != 0 {
			t.Fatalf("answer %d has a body", i)
		}
	}
}

func TestRelaySendsHeartbeatsOnAnIdleReceiveSession(t *testing.T) {
	f := start(t, Options{HeartbeatInterval: 5 * time.Millisecond, IdleTimeout: time.Hour}, relay.Options{})
	r := receiveSession(t, f.addr, f.key.Public, newDevice(t))
	for range 3 {
		r.expect(Heartbeat)
		r.write(Heartbeat, nil) // the device's echo
	}
}

func TestRelayEchoesAHeartbeatTheDeviceStarts(t *testing.T) {
	f := start(t, Options{HeartbeatInterval: time.Hour}, relay.Options{})
	r := receiveSession(t, f.addr, f.key.Public, newDevice(t))
	r.write(Heartbeat, nil)
	r.expect(Heartbeat)
}

func TestSilentSessionIsClosedAfterIdleTimeout(t *testing.T) {
	f := start(t, Options{HeartbeatInterval: time.Hour, IdleTimeout: 20 * time.Millisecond}, relay.Options{})
	r := receiveSession(t, f.addr, f.key.Public, newDevice(t))
	r.expectEnd()
	p := pushSession(t, f.addr, f.key.Public)
	p.expectEnd()
}

func TestHandshakeNotFinishedInTimeIsDropped(t *testing.T) {
	f := start(t, Options{HandshakeTimeout: 20 * time.Millisecond}, relay.Options{})
	c := dial(t, f.addr)
	if _, err := readMsg(c); err == nil {
		t.Fatal("the relay answered a handshake never started")
	}
	checkFor(t, "the failed handshake is counted", func() bool { return f.srv.Stats().HandshakeFailed == 1 })
}

func TestPushSessionToTheWrongRelayKeyFailsTheHandshake(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	if _, err := tryPushSession(t, f.addr, newDevice(t).Public); err == nil {
		t.Fatal("an NK handshake against another key succeeded")
	}
}

func TestSessionsPastMaxSessionsAreClosedAtOnce(t *testing.T) {
	f := start(t, Options{MaxSessions: 1}, relay.Options{})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public) // at the limit
	p.push(dev.Public, []byte("x"))
	p.expect(Ack)
	if _, err := tryPushSession(t, f.addr, f.key.Public); err == nil {
		t.Fatal("a second session past MaxSessions 1 was served")
	}
	if n := f.srv.Stats().SessionsRefused; n != 1 {
		t.Fatalf("%d sessions refused, want 1", n)
	}
	p.c.Close()
	checkFor(t, "the first session is gone", func() bool { return f.srv.Stats().Sessions == 0 })
	pushSession(t, f.addr, f.key.Public)
}

func TestLargestEnvelopeIsStoredAndDeliveredWhole(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	env := bytes.Repeat([]byte{0x5a}, MaxEnvelopeBytes)
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, env)
	p.expect(Ack)
	r := receiveSession(t, f.addr, f.key.Public, dev)
	if _, got := r.deliver(); !bytes.Equal(got, env) {
		t.Fatalf("delivered %d bytes, want %d", len(got), len(env))
	}
	// One byte more does not fit a Noise message: no client can send it.
	if n := HeaderBytes + KeyBytes + MaxEnvelopeBytes + 1 + TagBytes; n <= MaxNoiseMessage {
		t.Fatalf("a push of MaxEnvelopeBytes+1 is a %d-byte message, within the Noise limit", n)
	}
}

func TestFilesAndLogsHoldNoSenderIdentityNorKey(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	local := []byte(p.c.LocalAddr().String())
	p.push(dev.Public, []byte("opaque"))
	p.expect(Ack)
	r := receiveSession(t, f.addr, f.key.Public, dev)
	id, _ := r.deliver()
	r.deliverAck(id)
	checkFor(t, "the ack is applied", func() bool { return f.store.Stats().Acks == 1 })
	r.c.Close()
	p.c.Close()
	checkFor(t, "the sessions are gone", func() bool {
		st := f.srv.Stats()
		return st.PushSessions+st.ReceiveSessions == 0
	})
	secrets := map[string][]byte{
		"the sender's address":      local,
		"the device's key":          dev.Public,
		"the device's key, in hex":  []byte(PublicKeyText(dev.Public)),
		"the device's private key":  dev.Private,
		"the relay's private key":   f.key.Private,
		"the device's address":      []byte(r.c.LocalAddr().String()),
		"the device id in the logs": []byte(DeviceID(dev.Public)),
	}
	if err := filepath.Walk(f.dir+"/relay", func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for what, s := range secrets {
			if what != "the device id in the logs" && bytes.Contains(data, s) {
				t.Errorf("%s holds %s", path, what)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	logs := f.logs.Bytes()
	for what, s := range secrets {
		if bytes.Contains(logs, s) {
			t.Errorf("the logs hold %s", what)
		}
	}
	if bytes.Contains(logs, []byte("opaque")) {
		t.Error("the logs hold the envelope")
	}
}

func TestServerRefusesAKeyPairThatDoesNotMatch(t *testing.T) {
	st, err := relay.Open(t.TempDir(), relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := newDevice(t)
	k.Public = newDevice(t).Public
	if _, err := NewServer(Options{Key: k, Store: st}); !errors.Is(err, ErrBadKey) {
		t.Fatalf("%v, want ErrBadKey", err)
	}
	if _, err := NewServer(Options{Key: newDevice(t)}); !errors.Is(err, ErrNoStore) {
		t.Fatalf("%v, want ErrNoStore", err)
	}
}

// heldStore stands in for the store's PushAsync: it admits pushes and
// keeps their callbacks until released.
type heldStore struct {
	mu   sync.Mutex
	held []func(relay.Seq, error)
	peak int
}

func (h *heldStore) pushAsync(_ string, _ []byte, then func(relay.Seq, error)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, then)
	h.peak = max(h.peak, len(h.held))
	return nil
}

func (h *heldStore) admitted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

func (h *heldStore) releaseFirst() {
	h.mu.Lock()
	then := h.held[0]
	h.held = h.held[1:]
	h.mu.Unlock()
	then(1, nil)
}

func TestPushSessionHoldsAtMostMaxPushesInFlightUnanswered(t *testing.T) {
	const limit = 2
	f := start(t, Options{MaxPushesInFlight: limit}, relay.Options{})
	h := &heldStore{}
	f.srv.mu.Lock() // sessions start under mu (track): they see it
	f.srv.pushAsync = h.pushAsync
	f.srv.mu.Unlock()
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	for range limit + 1 {
		p.push(dev.Public, []byte("x"))
	}
	checkFor(t, "the pushes at the limit are admitted", func() bool { return h.admitted() == limit })
	h.releaseFirst() // one answer out: room for the one past the limit
	p.expect(Ack)
	checkFor(t, "the push past the limit is admitted", func() bool { return h.admitted() == limit })
	h.releaseFirst()
	h.releaseFirst()
	p.expect(Ack)
	p.expect(Ack)
	if h.peak > limit {
		t.Fatalf("%d pushes were unanswered at once, limit %d", h.peak, limit)
	}
}

func TestADeviceThatStopsReadingStallsNoOther(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	frozen, live := newDevice(t), newDevice(t)
	fr := receiveSession(t, f.addr, f.key.Public, frozen) // never read from
	_ = fr
	p := pushSession(t, f.addr, f.key.Public)
	big := make([]byte, MaxEnvelopeBytes)
	const n = 64 // about 4 MiB: more than the socket buffers between relay and device hold
	for range n {
		p.push(frozen.Public, big)
	}
	for range n {
		p.expect(Ack)
	}
	checkFor(t, "delivery to the frozen device has begun", func() bool {
		return f.srv.Stats().Delivered > 0
	})
	p.push(live.Public, []byte("still flowing"))
	p.expect(Ack)
	r := receiveSession(t, f.addr, f.key.Public, live)
	if _, env := r.deliver(); string(env) != "still flowing" {
		t.Fatalf("got %q", env)
	}
}

// fakeClock moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestBlobPastTheTTLIsNeverDelivered(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	f := start(t, Options{}, relay.Options{Now: clock.Now})
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, []byte("expires"))
	p.expect(Ack)
	clock.add(relay.DefaultTTL - time.Nanosecond)
	p.push(dev.Public, []byte("at the edge"))
	p.expect(Ack)
	clock.add(time.Nanosecond) // the first is at its TTL, the second is not
	p.push(dev.Public, []byte("fresh"))
	p.expect(Ack)
	r := receiveSession(t, f.addr, f.key.Public, dev)
	for _, want := range []string{"at the edge", "fresh"} {
		if _, env := r.deliver(); string(env) != want {
			t.Fatalf("delivered %q, want %q (the first blob reached its TTL)", env, want)
		}
	}
}

func TestServeConnServesAPipeAsItServesTCP(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	pipe := func() net.Conn {
		peer, relaySide := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); f.srv.ServeConn(relaySide) }()
		t.Cleanup(func() { peer.Close(); <-done })
		return peer
	}
	p := &client{t: t, c: pipe()}
	hsPush(t, p, f.key.Public)
	p.push(dev.Public, []byte("over a pipe"))
	p.expect(Ack)
	r := receiveSession(t, f.addr, f.key.Public, dev) // and out over TCP
	if _, env := r.deliver(); string(env) != "over a pipe" {
		t.Fatalf("got %q", env)
	}
}

func TestNoPushIsAdmittedAfterOneRefusedForNow(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	var mu sync.Mutex
	var offered []string
	f.srv.mu.Lock() // sessions start under mu (track): they see it
	f.srv.pushAsync = func(_ string, blob []byte, then func(relay.Seq, error)) error {
		mu.Lock()
		offered = append(offered, string(blob))
		mu.Unlock()
		if string(blob) == "refused" {
			return relay.ErrRateLimited
		}
		then(1, nil)
		return nil
	}
	f.srv.mu.Unlock()
	dev := newDevice(t)
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, []byte("first"))
	p.push(dev.Public, []byte("refused"))
	p.push(dev.Public, []byte("behind it")) // stored now, it would be delivered before the refused one, pushed again
	p.expect(Ack)
	p.expectEnd()
	mu.Lock()
	defer mu.Unlock()
	if len(offered) != 2 {
		t.Fatalf("pushes offered to the store: %q, want the first two only", offered)
	}
}
