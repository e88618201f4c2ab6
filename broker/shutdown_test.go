package broker_test

// Graceful shutdown as nodes see it: new work refused, open requests
// drained, every node told why it was disconnected.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func TestGracefulShutdown(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{DrainTimeout: 5 * time.Second})
	// Clients that do not reconnect: the broker's SHUTDOWN ends them (one
	// that does reconnects, to this broker again or another).
	once := func(o *client.Options) { o.MaxReconnects = client.NoReconnect }
	a := connect(t, e, "alpha", once)
	b := connect(t, e, "beta", once)
	release := make(chan struct{})
	entered := make(chan struct{})
	if _, err := a.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		close(entered)
		<-release
		return []byte("done"), nil
	}); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		r, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", nil)
		if err == nil && string(r.Payload()) != "done" {
			err = fmt.Errorf("reply %q", r.Payload())
		}
		res <- err
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- e.Broker.Shutdown(context.Background()) }()
	// New work is refused while the open request drains.
	testbroker.Eventually(t, 5*time.Second, "new requests refused", func() bool {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 5*time.Second), "alpha", nil)
		return errors.Is(err, client.ErrRejected)
	})
	close(release)
	if err := <-res; err != nil {
		t.Fatalf("open request during drain: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{a, b} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("client not disconnected")
		}
		if !strings.Contains(c.Err().Error(), string(wire.ResultShutdown)) {
			t.Fatalf("client ended with %v", c.Err())
		}
	}
}
