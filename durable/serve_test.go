package durable_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"busbar/broker"
	"busbar/durable"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/transport"
	"busbar/wire"
)

// The device's long-running instance, Serve, against a real broker relay
// over real sockets: it follows the connection, pushes at once when the
// connection comes back, hears another process's sends, and is told when
// a newer session of its device takes over.

// pairWith makes devices a and b of group "home" with the options given.
func pairWith(t *testing.T, oa, ob durable.Options) (a, b *durable.Device) {
	t.Helper()
	var err error
	if a, err = durable.Init(t.TempDir(), oa); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = durable.Init(t.TempDir(), ob); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	m1, err := a.CreateGroup("home", "a")
	if err != nil {
		t.Fatal(err)
	}
	m2, err := m1.Add(a.Identity(), b.Identity().Public(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.UpdateGroup(m2); err != nil {
		t.Fatal(err)
	}
	if err := b.InstallGroup(m2); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// serve runs d.Serve until the test ends, and returns its result.
func serve(t *testing.T, d *durable.Device, r durable.Relay, o durable.ServeOptions) (stop func(), result <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		res <- d.Serve(ctx, r, o)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return cancel, res
}

// refusing is a relay that refuses every push (UNAVAILABLE, temporary)
// while refuse is set, and counts the refusals.
type refusing struct {
	durable.LiveRelay
	refuse  atomic.Bool
	refused atomic.Int32
}

func (r *refusing) Push(ctx context.Context, blob []byte) (uint64, error) {
	if r.refuse.Load() {
		r.refused.Add(1)
		return 0, &durable.RefusedError{Code: durable.CodeUnavailable}
	}
	return r.LiveRelay.Push(ctx, blob)
}

// An entry whose backoff runs for minutes goes out as soon as the
// connection comes back (seed 001: "immediately on reconnect"): the
// sender's clock never moves, so nothing but the reconnect can release
// it.
func TestServePushesAtOnceWhenTheConnectionComesBack(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	var now atomic.Int64 // the sender's clock, moved by hand
	now.Store(time.Now().UnixNano())
	a, b := pairWith(t, durable.Options{Now: func() time.Time { return time.Unix(0, now.Load()) }}, durable.Options{})
	ca, dr := testclient.ConnectDroppable(t, e, "device-a")
	r := &refusing{LiveRelay: durable.NewClientRelay(ca).(durable.LiveRelay)}
	r.refuse.Store(true)
	if _, err := a.Send(testclient.Ctx(t, 5*time.Second), "home", []byte("held back")); err != nil {
		t.Fatal(err)
	}
	// Nine refusals, the clock moved past each backoff: the tenth
	// (Serve's first push) leaves the entry due in five minutes.
	for i := range 9 {
		if _, err := a.Flush(testclient.Ctx(t, 5*time.Second), r); err != nil {
			t.Fatal(err)
		}
		now.Add(int64(durable.MaxBackoff))
		if n := r.refused.Load(); n != int32(i+1) {
			t.Fatalf("round %d: %d refusals", i, n)
		}
	}
	serve(t, a, r, durable.ServeOptions{})
	testbroker.Eventually(t, 10*time.Second, "Serve's push refused", func() bool { return r.refused.Load() == 10 })
	r.refuse.Store(false)

	got := make(chan string, 1)
	if _, err := b.OnMessage(func(_ context.Context, m durable.Message) error { got <- string(m.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	serve(t, b, durable.NewClientRelay(testclient.Connect(t, e, "device-b")), durable.ServeOptions{})
	dr.Drop()
	select {
	case body := <-got:
		if body != "held back" {
			t.Fatalf("got %q", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("not pushed after the reconnect (refusals %d, outbox %v)", r.refused.Load(), outbox(t, a))
	}
}

func outbox(t *testing.T, d *durable.Device) int {
	n, err := d.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Another process of the device (another Device on the same directory)
// queues a message; the running Serve pushes it, told by the change
// signal: its poll is an hour, and the other process pushes nothing.
func TestServePushesWhatAnotherProcessOfTheDeviceQueued(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	a, b := pairWith(t, durable.Options{}, durable.Options{})
	serve(t, a, durable.NewClientRelay(testclient.Connect(t, e, "device-a")), durable.ServeOptions{Poll: time.Hour})
	got := make(chan string, 1)
	if _, err := b.OnMessage(func(_ context.Context, m durable.Message) error { got <- string(m.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	serve(t, b, durable.NewClientRelay(testclient.Connect(t, e, "device-b")), durable.ServeOptions{Poll: time.Hour})
	other, err := durable.Open(a.Dir(), durable.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Send(testclient.Ctx(t, 5*time.Second), "home", []byte("from the other shell")); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-got:
		if body != "from the other shell" {
			t.Fatalf("got %q", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the running Serve did not push what another process queued")
	}
}

// Two processes of one device receive: the newer session takes over, the
// relay tells the older one, whose Serve returns ErrTakenOver; the newer
// receives what comes next.
func TestANewerReceiverTakesOverAndTheOlderIsTold(t *testing.T) {
	for _, scheme := range []string{"unix", "tcp"} {
		t.Run(scheme, func(t *testing.T) {
			e := testbroker.Start(t, scheme, broker.Options{RelayDir: t.TempDir()})
			a, b := pairWith(t, durable.Options{}, durable.Options{})
			first := make(chan string, 4)
			if _, err := b.OnMessage(func(_ context.Context, m durable.Message) error { first <- string(m.Body); return nil }); err != nil {
				t.Fatal(err)
			}
			acked := make(chan struct{}, 4)
			_, older := serve(t, b, durable.NewClientRelay(testclient.Connect(t, e, "b-first")), durable.ServeOptions{
				OnDone: func(durable.Message, error) { acked <- struct{}{} },
			})
			ra := durable.NewClientRelay(testclient.Connect(t, e, "device-a"))
			send := func(body string) {
				if _, err := a.Send(testclient.Ctx(t, 5*time.Second), "home", []byte(body)); err != nil {
					t.Fatal(err)
				}
				if _, err := a.Flush(testclient.Ctx(t, 5*time.Second), ra); err != nil {
					t.Fatal(err)
				}
			}
			send("one")
			expectBodies(t, first, []string{"one"})
			// Taken over only once "one" is acked: taken over while it is
			// being handled, it comes again to the newer (the seed's crash
			// window, which a takeover opens as a crash does).
			select {
			case <-acked:
			case <-time.After(20 * time.Second):
				t.Fatal("one was never acked")
			}

			b2, err := durable.Open(b.Dir(), durable.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			second := make(chan string, 4)
			if _, err := b2.OnMessage(func(_ context.Context, m durable.Message) error { second <- string(m.Body); return nil }); err != nil {
				t.Fatal(err)
			}
			serve(t, b2, durable.NewClientRelay(testclient.Connect(t, e, "b-second")), durable.ServeOptions{})
			select {
			case err := <-older:
				if !errors.Is(err, durable.ErrTakenOver) {
					t.Fatalf("the older Serve ended with %v, want ErrTakenOver", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the older receiver was not told")
			}
			send("two")
			expectBodies(t, second, []string{"two"})
		})
	}
}

// The broker is replaced by one that speaks only newer versions: the
// client's reconnect is refused, Serve reports relayVersionUnsupported
// {2, 3} as a state and returns it, and the entry stays queued with no
// sendFailed.
func TestServeReportsRelayVersionUnsupported(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	a, _ := pairWith(t, durable.Options{}, durable.Options{})
	c, _ := testclient.ConnectDroppable(t, e, "device-a")
	states := make(chan durable.State, 16)
	_, res := serve(t, a, durable.NewClientRelay(c), durable.ServeOptions{OnState: func(s durable.State) { states <- s }})
	sock, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Broker.Shutdown(shut); err != nil {
		t.Fatal(err)
	}
	testbroker.ServeOtherVersion(t, sock.Address, 2, 3)
	if _, err := a.Send(testclient.Ctx(t, 5*time.Second), "home", []byte("for later")); err != nil {
		t.Fatal(err)
	}
	var err2 error
	select {
	case err2 = <-res:
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not end")
	}
	var rv *durable.RelayVersionUnsupported
	if !errors.As(err2, &rv) || rv.Min != 2 || rv.Max != 3 || rv.Have != wire.ProtocolVersion {
		t.Fatalf("Serve ended with %v", err2)
	}
	seen := false
	for len(states) > 0 {
		if s := <-states; s.Kind == durable.StateRelayVersionUnsupported && s.Min == 2 && s.Max == 3 {
			seen = true
		}
	}
	if !seen {
		t.Fatal("no relayVersionUnsupported state reported")
	}
	if n := outbox(t, a); n != 1 {
		t.Fatalf("outbox %d, want the entry kept", n)
	}
	if evs, _, err := a.Events(0); err != nil || len(evs) != 0 {
		t.Fatalf("events %v (%v), want none", evs, err)
	}
}
