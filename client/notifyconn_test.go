package client_test

import (
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
)

// NotifyConn's functions hear the connection go and come back, after
// OnConnEvent, until they are stopped; WaitConnected returns once it is
// back.
func TestNotifyConnFollowsTheConnectionUntilStopped(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{})
	var mu sync.Mutex
	var order []string
	c, dr := testclient.ConnectDroppable(t, e, "watched", func(o *client.Options) {
		o.OnConnEvent = func(ev client.ConnEvent) {
			mu.Lock()
			order = append(order, "options "+string(ev.Kind))
			mu.Unlock()
		}
	})
	heard := make(chan client.ConnEventKind, 8)
	stop := c.NotifyConn(func(ev client.ConnEvent) {
		mu.Lock()
		order = append(order, "watcher "+string(ev.Kind))
		mu.Unlock()
		heard <- ev.Kind
	})
	stopped := c.NotifyConn(func(client.ConnEvent) { t.Error("a stopped watcher was told") })
	stopped()
	dr.Drop()
	for _, want := range []client.ConnEventKind{client.Disconnected, client.Reconnected} {
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("heard %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not heard", want)
		}
	}
	if err := c.WaitConnected(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(order) < 2 || order[0] != "options disconnected" || order[1] != "watcher disconnected" {
		t.Errorf("order %q, want OnConnEvent first", order)
	}
	mu.Unlock()
	stop()
	dr.Drop()
	testbroker.Eventually(t, 10*time.Second, "the client back again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range order {
			if o == "options reconnected" {
				n++
			}
		}
		return n == 2
	})
	select {
	case ev := <-heard:
		t.Fatalf("told %s after stop", ev)
	default:
	}
	c.Close()
	if err := c.WaitConnected(ctxT(t, 5*time.Second)); err == nil {
		t.Fatal("WaitConnected on a closed client returned nil")
	}
}
