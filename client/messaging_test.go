package client_test

// Messaging end to end over every transport: sends and their receipts,
// requests and replies, publications and their per-node results, and
// registrations.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/wire"
)

func testOpts() broker.Options { return broker.Options{} }

type inbox = testclient.Inbox

func TestSendReceipts(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		a := connect(t, e, "alpha")
		b := connect(t, e, "beta")
		var in1, in2 inbox
		ch := a.Scope("plugin").Channel("orders.created")
		for _, in := range []*inbox{&in1, &in2} {
			if _, err := ch.Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
				t.Fatal(err)
			}
		}
		payload := []byte("order 1")
		r, _ := b.Scope("p").Channel("orders.created").Send(ctxT(t, 5*time.Second), "alpha", payload)
		payload[0] = 'X' // the caller may reuse its buffer at once
		if r.Result != wire.Accepted || r.ID == "" || r.Node != "alpha.bus" {
			t.Fatalf("receipt = %+v", r)
		}
		testbroker.Eventually(t, 5*time.Second, "both subscribers", func() bool { return in1.Len() == 1 && in2.Len() == 1 })
		for _, in := range []*inbox{&in1, &in2} {
			m := in.Get(0)
			if m.ID() != r.ID || m.From() != "beta.bus" || m.Kind() != client.Event || m.Channel() != "orders.created" || string(m.Payload()) != "order 1" {
				t.Fatalf("delivered %+v", m)
			}
		}
		// The other outcomes.
		cases := []struct {
			target, channel string
			want            wire.Result
		}{
			{"gamma", "orders.created", wire.NotConnected},
			{"alpha", "orders.deleted", wire.NoSubscriber},
			{e.Broker.Name(), "orders.created", wire.NoSubscriber},
			{"alpha.bus@mesh.example.com", "orders.created", ""}, // "": refused before sending, an error and no receipt
			{"Alpha", "orders.created", ""},
			{"alpha", "bus.sneaky", ""},
		}
		for _, c := range cases {
			r, err := b.Scope("p").Channel(c.channel).Send(ctxT(t, 5*time.Second), c.target, nil)
			if r.Result != c.want || (err != nil) != (c.want == "") {
				t.Errorf("send to %s on %s = %+v, %v, want %q", c.target, c.channel, r, err, c.want)
			}
		}
	})
}

func TestRequestReply(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		a := connect(t, e, "alpha")
		b := connect(t, e, "beta")
		ch := a.Scope("math").Channel("math.double")
		_, err := ch.Handle(ctxT(t, 5*time.Second), func(_ context.Context, m *client.Message) ([]byte, error) {
			if m.From() != "beta.bus" || m.Kind() != client.Request {
				return nil, fmt.Errorf("bad request %+v", m)
			}
			var n int
			fmt.Sscan(string(m.Payload()), &n)
			switch n {
			case -1:
				return nil, errors.New("negative")
			case -2:
				return nil, &client.HandlerError{RC: wire.RCFailure, Text: "very negative"}
			case -3:
				panic("boom")
			}
			return fmt.Appendf(nil, "%d", 2*n), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Scope("other").Channel("math.double").Handle(ctxT(t, 5*time.Second), nil); !errors.Is(err, client.ErrHandlerExists) {
			t.Fatalf("second handler: %v", err)
		}
		bc := b.Scope("p").Channel("math.double")
		req := []byte("21")
		reply, err := bc.Request(ctxT(t, 5*time.Second), "alpha", req)
		if err != nil {
			t.Fatal(err)
		}
		if string(reply.Payload()) != "42" || reply.Kind() != client.Reply || reply.From() != "alpha.bus" || reply.ReplyTo() == "" || reply.ID() == reply.ReplyTo() {
			t.Fatalf("reply = %+v", reply)
		}
		for _, c := range []struct {
			payload string
			want    error
			rc      wire.RC
		}{
			{"-1", client.ErrHandlerFailed, wire.RCError},
			{"-2", client.ErrHandlerFailed, wire.RCFailure},
			{"-3", client.ErrHandlerFailed, wire.RCFailure},
		} {
			_, err := bc.Request(ctxT(t, 5*time.Second), "alpha", []byte(c.payload))
			var re *client.RequestError
			if !errors.Is(err, c.want) || !errors.As(err, &re) || re.RC != c.rc || re.From != "alpha.bus" {
				t.Errorf("payload %s: %v", c.payload, err)
			}
		}
		if _, err := b.Scope("p").Channel("math.triple").Request(ctxT(t, 5*time.Second), "alpha", nil); !errors.Is(err, client.ErrNoHandler) {
			t.Errorf("no handler: %v", err)
		}
		if _, err := bc.Request(ctxT(t, 5*time.Second), "gamma", nil); !errors.Is(err, client.ErrNoHandler) {
			t.Errorf("not connected: %v", err)
		}
	})
}

func TestConcurrentRequestsMatchTheirReplies(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	const n, workers = 64, 16
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = workers })
	b := connect(t, e, "beta")
	// Replies leave out of order: the handlers are held in batches of as
	// many as there are workers, and each batch is released last first.
	arrived := make(chan chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for left := n; left > 0; {
			batch := make([]chan struct{}, min(workers, left))
			for i := range batch {
				select {
				case batch[i] = <-arrived:
				case <-stop:
					return
				}
			}
			for i := len(batch) - 1; i >= 0; i-- {
				close(batch[i])
			}
			left -= len(batch)
		}
	}()
	_, err := a.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
		release := make(chan struct{})
		select {
		case arrived <- release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return m.Payload(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			want := fmt.Sprintf("call %d", i)
			r, err := b.Scope("s").Channel("echo").Request(ctxT(t, 10*time.Second), "alpha", []byte(want))
			if err != nil {
				errs <- err
				return
			}
			if string(r.Payload()) != want {
				errs <- fmt.Errorf("call %d got %q", i, r.Payload())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPublishResults(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *testbroker.Env) {
		a := connect(t, e, "alpha")
		b := connect(t, e, "beta")
		c := connect(t, e, "gamma")
		var ina, inc inbox
		for _, x := range []struct {
			cl *client.Client
			in *inbox
		}{{a, &ina}, {c, &inc}} {
			if _, err := x.cl.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), x.in.Handler); err != nil {
				t.Fatal(err)
			}
		}
		res, err := a.Scope("s").Channel("news").Publish(ctxT(t, 5*time.Second), []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		want := []wire.NodeResult{
			{Node: "alpha", Result: wire.Accepted},
			{Node: "beta", Result: wire.NoSubscriber},
			{Node: e.Broker.Name(), Result: wire.NoSubscriber},
			{Node: "gamma", Result: wire.Accepted},
		}
		slices.SortFunc(want, func(x, y wire.NodeResult) int { return compare(x.Node, y.Node) })
		if !slices.Equal(res.Results, want) {
			t.Fatalf("results = %v, want %v", res.Results, want)
		}
		testbroker.Eventually(t, 5*time.Second, "deliveries", func() bool { return ina.Len() == 1 && inc.Len() == 1 })
		if m := inc.Get(0); m.ID() != res.ID || m.From() != "alpha.bus" || m.To() != "" {
			t.Fatalf("delivered %+v", m)
		}
		_ = b
	})
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestSendWithoutTargetRefused: a Send with no target is refused and
// reaches nobody: on the wire an event without "to" is a publication.
// (An empty target used to go out as a publication to every subscriber.)
func TestSendWithoutTargetRefused(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1 }) // callbacks in arrival order
	b := connect(t, e, "beta")
	var in inbox
	if _, err := a.Scope("s").Channel("orders.x").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	r, err := b.Scope("s").Channel("orders.x").Send(ctxT(t, 5*time.Second), "", []byte("p"))
	// A marker sent next on the same connection is queued behind anything
	// the empty send delivered.
	if rc, _ := b.Scope("s").Channel("orders.x").Send(ctxT(t, 5*time.Second), "alpha", []byte("marker")); rc.Result != wire.Accepted {
		t.Fatalf("marker: %+v", rc)
	}
	testbroker.Eventually(t, 5*time.Second, "the marker delivered", func() bool { return in.Len() >= 1 })
	if n, first := in.Len(), string(in.Get(0).Payload()); !errors.Is(err, wire.ErrBadAddress) || n != 1 || first != "marker" {
		t.Fatalf("Send with an empty target: receipt %+v, %v, %d delivered (the first %q); want ErrBadAddress and only the marker delivered", r, err, n, first)
	}
}

// TestConcurrentSubscribersShareRefusal: subscribers that join while the
// broker has not yet answered the channel's registration get its verdict
// too: a refusal reaches them all.
// (A subscriber that joined a pending registration used to get nil.)
func TestConcurrentSubscribersShareRefusal(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts(),
		auth.Principal{Name: "deaf", Nodes: []auth.Pattern{"*"}, Permissions: auth.Permissions{Subscribe: []auth.Pattern{"ok"}}})
	d := connect(t, e, "deaf", func(o *client.Options) { o.Credential.Principal = "deaf" })
	for i := range 30 {
		name := fmt.Sprintf("denied.c%d", i)
		start := make(chan struct{})
		errs := make(chan error, 2)
		for j := range 2 {
			go func() {
				<-start
				_, err := d.Scope(fmt.Sprint("p", j)).Channel(name).Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {})
				errs <- err
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err == nil {
				t.Fatalf("attempt %d: Subscribe on %s returned nil although the node may not subscribe to it", i, name)
			}
		}
	}
}

// TestReceiptQueuedBeforeCallback: the ACCEPTED receipt is queued before
// the callback can run, so a callback that closes the client (busbar sub
// --count 1) does not turn its own event into FAILED. A scheduling race:
// up to 800 attempts.
// (A callback that closed the client used to turn its own event's receipt
// into FAILED.)
func TestReceiptQueuedBeforeCallback(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	b := connect(t, e, "beta")
	deadline := time.Now().Add(6 * time.Second)
	for i := 0; i < 800 && time.Now().Before(deadline); i++ {
		node := fmt.Sprint("watcher-", i)
		a, err := dialClient(e, node)
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		if _, err := a.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {
			go func() { a.Close(); close(closed) }() // got my one message: exit
		}); err != nil {
			t.Fatal(err)
		}
		r, _ := b.Scope("s").Channel("news").Send(ctxT(t, 5*time.Second), node, nil)
		<-closed
		if r.Result != wire.Accepted {
			t.Fatalf("attempt %d: an event its subscriber handled got receipt %+v, want ACCEPTED", i, r)
		}
	}
}
