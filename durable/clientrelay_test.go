package durable_test

import (
	"context"
	"testing"
	"time"

	"busbar/broker"
	"busbar/durable"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/seal"
)

// Two devices, each on its own client connection to a real broker that is
// a relay: what one sends, in order, reaches the other's handler; a
// session that ends frees the client for the next one.
func TestDevicesExchangeThroughABrokerRelay(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	a, b := pairedDevices(t)
	ra := durable.NewClientRelay(testclient.Connect(t, e, "device-a"))
	rb := durable.NewClientRelay(testclient.Connect(t, e, "device-b"))

	bodies := []string{"one", "two", "three"}
	for _, body := range bodies {
		if _, err := a.Send(testclient.Ctx(t, 5*time.Second), "home", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Flush(testclient.Ctx(t, 5*time.Second), ra); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, len(bodies))
	cancel, err := b.OnMessage(func(_ context.Context, m durable.Message) error {
		if m.From.Public.ID() != a.ID() {
			t.Errorf("message from %v, want %v", m.From.Public.ID(), a.ID())
		}
		got <- string(m.Body)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runDevice(t, b, rb)
	expectBodies(t, got, bodies)
	// A new handler opens a new session on the same client.
	cancel()
	again := make(chan string, 1)
	if _, err := b.OnMessage(func(_ context.Context, m durable.Message) error { again <- string(m.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(testclient.Ctx(t, 5*time.Second), "home", []byte("four")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(testclient.Ctx(t, 5*time.Second), ra); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-again:
		if body != "four" {
			t.Fatalf("after a new session: %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing arrived on the second session")
	}
	stop()
}

// Through a real broker relay: a manifest whose signer the receiving
// device does not know yet is kept while the device keeps receiving, and
// applied when the manifest introducing its signer comes; then the new
// member's messages reach the handler.
func TestManifestsOutOfOrderThroughABrokerRelay(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	var devs [3]*durable.Device
	for i := range devs {
		d, err := durable.Init(t.TempDir(), durable.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	a, b, x := devs[0], devs[1], devs[2]
	m1, err := b.CreateGroup("home", "b")
	if err != nil {
		t.Fatal(err)
	}
	m2 := must(m1.Add(b.Identity(), a.Identity().Public(), "a"))
	m3 := must(m2.Add(b.Identity(), x.Identity().Public(), "x")) // b sends it last
	m4 := must(m3.Add(x.Identity(), must(seal.Generate()).Public(), "y"))
	if err := b.UpdateGroup(m2); err != nil {
		t.Fatal(err)
	}
	if err := a.InstallGroup(m2); err != nil {
		t.Fatal(err)
	}
	if err := x.InstallGroup(m3); err != nil {
		t.Fatal(err)
	}
	ra := durable.NewClientRelay(testclient.Connect(t, e, "device-a"))
	rb := durable.NewClientRelay(testclient.Connect(t, e, "device-b"))
	rx := durable.NewClientRelay(testclient.Connect(t, e, "device-x"))

	got := make(chan durable.Message, 1)
	if _, err := a.OnMessage(func(_ context.Context, m durable.Message) error { got <- m; return nil }); err != nil {
		t.Fatal(err)
	}
	defer runDevice(t, a, ra)()
	change := func(d *durable.Device, r durable.Relay, m *seal.Manifest) {
		t.Helper()
		if _, err := d.ChangeGroup(testclient.Ctx(t, 5*time.Second), seal.KindGroupManifest, m); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Flush(testclient.Ctx(t, 5*time.Second), r); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() int {
		n, err := a.PendingManifests()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	epoch := func() uint64 {
		m, err := a.Group("home")
		if err != nil || m == nil {
			t.Fatalf("a holds no manifest (%v)", err)
		}
		return m.Epoch()
	}

	change(x, rx, m4)
	testbroker.Eventually(t, 10*time.Second, "epoch 4 kept", func() bool { return pending() == 1 })
	if epoch() != 2 {
		t.Fatalf("a holds epoch %d", epoch())
	}
	change(b, rb, m3)
	testbroker.Eventually(t, 10*time.Second, "epochs 3 and 4 held", func() bool { return epoch() == 4 && pending() == 0 })

	if _, err := x.Send(testclient.Ctx(t, 5*time.Second), "home", []byte("from x")); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Flush(testclient.Ctx(t, 5*time.Second), rx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if string(m.Body) != "from x" || m.From.ID() != x.ID() {
			t.Fatalf("handled %q from %v", m.Body, m.From.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("x's message never arrived")
	}
	if evs, _, err := a.TakeEvents(); err != nil || len(evs) != 0 {
		t.Fatalf("events %+v (%v)", evs, err)
	}
}

// must is for the setup's constructors, which fail only on a bug.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
