package durable_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"busbar/broker"
	"busbar/durable"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
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
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx, rb) }()
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
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run ended with %v", err)
	}
}
