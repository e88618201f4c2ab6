package client_test

// How a node dispatches callbacks: a bounded executor and queue, refusals
// when they are full, deadlines that include queueing, and scopes and
// Close that revoke queued and open work.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func echo(_ context.Context, m *client.Message) ([]byte, error) { return m.Payload(), nil }

// TestStalledHandlerDoesNotStallConnection: with the one worker stuck and
// the dispatch queue full, new work is refused (OVERLOAD, BACKPRESSURED)
// while the connection keeps serving.
func TestStalledHandlerDoesNotStallConnection(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1; o.DispatchQueue = 1 })
	b := connect(t, e, "beta")
	_, err := a.Scope("s").Channel("slow").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var in inbox
	if _, err := a.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	bs := b.Scope("s")
	first := make(chan error, 1)
	go func() { _, err := bs.Channel("slow").Request(ctxT(t, 10*time.Second), "alpha", nil); first <- err }()
	<-started // the one worker is stuck
	if r, _ := bs.Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", nil); r.Result != wire.Accepted {
		t.Fatalf("event into the free queue slot: %+v", r)
	}
	if r, _ := bs.Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", nil); r.Result != wire.Backpressured {
		t.Fatalf("event into a full queue: %+v", r)
	}
	if _, err := bs.Channel("slow").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrOverload) {
		t.Fatalf("request into a full queue: %v", err)
	}
	// The connection itself still answers.
	if _, err := a.Directory(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "queued event delivered", func() bool { return in.Len() == 1 })
}

// TestScopeCloseIsIndependent: closing one plugin's scope revokes only its
// registrations and calls; its handles cannot start new work.
func TestScopeCloseIsIndependent(t *testing.T) {
	e := testbroker.Start(t, "inproc", testOpts())
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	p1, p2 := a.Scope("plugin-1"), a.Scope("plugin-2")
	var in1, in2 inbox
	if _, err := p1.Channel("ev").Subscribe(ctxT(t, 5*time.Second), in1.Handler); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Channel("ev").Subscribe(ctxT(t, 5*time.Second), in2.Handler); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Channel("rpc").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	// A call of p1 that is open when p1 closes fails with ErrScopeClosed.
	hang := make(chan struct{})
	defer close(hang)
	hanging := make(chan struct{}, 1)
	if _, err := b.Scope("s").Channel("hang").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		hanging <- struct{}{}
		<-hang
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	openCall := make(chan error, 1)
	go func() { _, err := p1.Channel("hang").Request(ctxT(t, 10*time.Second), "beta", nil); openCall <- err }()
	<-hanging // the call is open
	p1.Close()
	if err := <-openCall; !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("open call: %v", err)
	}
	bs := b.Scope("s")
	if r, _ := bs.Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", []byte("1")); r.Result != wire.Accepted {
		t.Fatalf("send after p1 closed: %+v", r)
	}
	testbroker.Eventually(t, 5*time.Second, "p2 still receives", func() bool { return in2.Len() == 1 })
	if in1.Len() != 0 {
		t.Fatal("closed scope's subscriber ran")
	}
	if _, err := bs.Channel("rpc").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrNoHandler) {
		t.Fatalf("request to revoked handler: %v", err)
	}
	// Retained handles of p1 cannot create new work.
	ch := p1.Channel("ev")
	if _, err := ch.Subscribe(ctxT(t, 5*time.Second), in1.Handler); !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if _, err := ch.Send(ctxT(t, 5*time.Second), "beta", nil); !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := ch.Publish(ctxT(t, 5*time.Second), nil); !errors.Is(err, client.ErrScopeClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	// The channel can be handled again by another scope.
	if _, err := p2.Channel("rpc").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
}

// TestTimeoutIncludesQueueing: a request that waits in the dispatch queue
// past its deadline times out and is never handed to the handler.
func TestTimeoutIncludesQueueing(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1 })
	b := connect(t, e, "beta")
	release := make(chan struct{})
	var calls atomic.Int32
	_, err := a.Scope("s").Channel("work").Handle(ctxT(t, 5*time.Second), func(_ context.Context, m *client.Message) ([]byte, error) {
		calls.Add(1)
		if string(m.Payload()) == "block" {
			<-release
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := b.Scope("s").Channel("work").Request(ctxT(t, 10*time.Second), "alpha", []byte("block"))
		first <- err
	}()
	testbroker.Eventually(t, 5*time.Second, "worker busy", func() bool { return calls.Load() == 1 })
	// It times out while the worker is still blocked (release comes
	// later): the deadline covered the wait in the queue.
	_, err = b.Scope("s").Channel("work").Request(ctxT(t, 200*time.Millisecond), "alpha", []byte("queued"))
	var re *client.RequestError
	if !errors.Is(err, client.ErrTimeout) || !errors.As(err, &re) || !re.Timeout() {
		t.Fatalf("queued request: %v", err)
	}
	// Round trips through the broker, from beta and then from alpha: the
	// expired request is now in alpha's dispatch queue (or dropped on the
	// way), behind the blocked one.
	if _, err := b.Whois(ctxT(t, 5*time.Second), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Whois(ctxT(t, 5*time.Second), ""); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The one worker takes the queue in order: once a later request is
	// answered, it has passed the expired one.
	if _, err := b.Scope("s").Channel("work").Request(ctxT(t, 5*time.Second), "alpha", []byte("later")); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times for the first and the later request; the expired request must not be dispatched", n)
	}
}

// TestCloseDropsQueuedCallbacks: Client.Close revokes every scope's
// registrations, so callbacks still queued in the executor do not run
// after it.
// (Close used to end the connection but let queued callbacks run.)
func TestCloseDropsQueuedCallbacks(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a, err := dialClient(e, "alpha", func(o *client.Options) { o.Workers = 1 })
	if err != nil {
		t.Fatal(err)
	}
	b := connect(t, e, "beta")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var afterClose atomic.Int32
	var closing atomic.Bool
	if _, err := a.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) {
		if closing.Load() {
			afterClose.Add(1)
		}
		if string(m.Payload()) == "block" {
			entered <- struct{}{}
			<-release
		}
	}); err != nil {
		t.Fatal(err)
	}
	ch := b.Scope("s").Channel("ev")
	if r, _ := ch.Send(ctxT(t, 5*time.Second), "alpha", []byte("block")); r.Result != wire.Accepted {
		t.Fatal(r)
	}
	<-entered
	if r, _ := ch.Send(ctxT(t, 5*time.Second), "alpha", []byte("queued")); r.Result != wire.Accepted {
		t.Fatal(r)
	}
	closing.Store(true)
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	<-a.Done()
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	if n := afterClose.Load(); n != 0 {
		t.Fatalf("%d queued callback(s) ran after Client.Close closed every scope", n)
	}
}
