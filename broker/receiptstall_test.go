package broker_test

// A subscriber that keeps its lease but stopped reading owes receipts it
// will never send: it is cut as a slow consumer once it has owed some and
// answered none for ReceiptTimeout, and what it owed is answered TIMED_OUT
// then, not at each publication's deadline.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

const receiptTimeout = 500 * time.Millisecond

// rawSubscriber logs a raw node in and subscribes it to channel "s:news"
// (the scope s's channel news).
func rawSubscriber(t *testing.T, e *testbroker.Env, node string) *testbroker.Raw {
	t.Helper()
	r := e.DialRaw(t)
	if m := r.Hello(t, wire.ProtocolVersion, node, "local", e.Secrets["local"]); wire.ResponseRC(m).IsError() {
		t.Fatalf("hello: %v", m)
	}
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "sub").WithBody([]byte("news")))
	if m := r.Read(t); wire.ResponseRC(m).IsError() {
		t.Fatalf("subscribe: %v", m)
	}
	return r
}

func resultOf(res client.PublishResult, node string) wire.Result {
	for _, r := range res.Results {
		if r.Node == node {
			return r.Result
		}
	}
	return ""
}

func TestSubscriberThatStopsReadingIsCutAndAnsweredTimedOut(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{ReceiptTimeout: receiptTimeout})
	frozen := rawSubscriber(t, e, "frozen") // reads nothing from here on
	healthy := connect(t, e, "healthy")
	if _, err := healthy.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	pub := connect(t, e, "pub").Scope("s").Channel("news")

	// The publication is answered once the frozen node has owed its receipt
	// for ReceiptTimeout (and a sweep saw it), long before its own 30 s.
	start := time.Now()
	res, err := pub.Publish(ctxT(t, 30*time.Second), []byte("one"))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if resultOf(res, "frozen") != wire.TimedOut || resultOf(res, "healthy") != wire.Accepted {
		t.Fatalf("results %v, want frozen TIMED_OUT and healthy ACCEPTED", res.Results)
	}
	if took < receiptTimeout || took > 10*time.Second {
		t.Fatalf("answered after %v, want after ReceiptTimeout (%v) and well before the publication's deadline", took, receiptTimeout)
	}
	if n := e.Broker.Stats().SlowConsumers; n != 1 {
		t.Fatalf("%d slow consumers counted, want 1", n)
	}
	// The frozen node is told why and is gone; publications go on at the
	// healthy node's pace.
	for {
		m, err := frozen.ReadErr()
		if err != nil {
			t.Fatalf("the frozen node was not told why: %v", err)
		}
		if m.Value(wire.HeaderCommand) == wire.CmdError {
			if m.Value(wire.HeaderResult) != string(wire.ResultSlow) || !strings.Contains(m.Value(wire.HeaderError), "receipts") {
				t.Fatalf("the frozen node read %v", m)
			}
			break
		}
	}
	testbroker.Eventually(t, 10*time.Second, "frozen gone from the directory", func() bool {
		for _, n := range e.Broker.Directory() {
			if n.Node == "frozen" {
				return false
			}
		}
		return true
	})
	for range 20 {
		res, err := pub.Publish(ctxT(t, 30*time.Second), []byte("more"))
		if err != nil || resultOf(res, "frozen") != "" || resultOf(res, "healthy") != wire.Accepted {
			t.Fatalf("after the cut: %v %v", res.Results, err)
		}
	}
	if n := e.Broker.Stats().SlowConsumers; n != 1 {
		t.Fatalf("%d slow consumers counted, want still 1", n)
	}
}

// A node that answers each receipt a third of ReceiptTimeout after its
// delivery is not cut, however long it goes on: the clock restarts at
// every answer. (The timeout is longer than the other tests': two thirds
// of it is what a loaded machine may add to each answer's way.)
func TestSubscriberThatAnswersWithinTheReceiptTimeoutIsKept(t *testing.T) {
	const receiptTimeout = 3 * time.Second
	e := testbroker.Start(t, "tcp", broker.Options{ReceiptTimeout: receiptTimeout})
	slow := rawSubscriber(t, e, "slow")
	pub := connect(t, e, "pub").Scope("s").Channel("news")
	const rounds = 4 // 4 × ReceiptTimeout / 3: more than the timeout in all
	done := make(chan error, 1)
	go func() { // owned by the test: ends after rounds publications
		var err error
		for range rounds {
			var res client.PublishResult
			if res, err = pub.Publish(ctxT(t, 30*time.Second), []byte("x")); err == nil && resultOf(res, "slow") != wire.Accepted {
				err = fmt.Errorf("results %v", res.Results)
			}
			if err != nil {
				break
			}
		}
		done <- err
	}()
	for range rounds {
		ev := slow.Read(t)
		if ev.Value(wire.HeaderCommand) != "news" {
			t.Fatalf("read %v, want the event", ev)
		}
		time.Sleep(receiptTimeout / 3) // the node's own slowness, under the limit
		slow.Send(t, wire.New(wire.TypeResponse, wire.CmdReceipt).WithHeader(wire.HeaderReplyTo, ev.Value(wire.HeaderID)).
			WithHeader(wire.HeaderResult, string(wire.Accepted)))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.Broker.Stats().SlowConsumers; n != 0 {
		t.Fatalf("%d slow consumers, want none", n)
	}
}
