package broker_test

// The messaging contract (docs/messaging.md) for nodes wherever they are
// connected: on one broker, or each on its own broker of a bus
// (eachTopology). The same receipts, typed errors, deadlines and stamped
// sources either way.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestRequestReachesItsHandlerWhereverItIs: a request reaches the
// handler's node with the sender's address stamped by the sender's
// broker, and the reply comes back from the handler's address.
func TestRequestReachesItsHandlerWhereverItIs(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		beta := connect(t, p.at(1), "beta")
		from := make(chan string, 1)
		if _, err := beta.Scope("s").Channel("orders.get").Handle(ctxT(t, 5*time.Second), func(_ context.Context, m *client.Message) ([]byte, error) {
			from <- m.From()
			return append([]byte("got "), m.Payload()...), nil
		}); err != nil {
			t.Fatal(err)
		}
		p.sees(t, "beta")
		m, err := alpha.Scope("s").Channel("orders.get").Request(ctxT(t, 5*time.Second), "beta", []byte("42"))
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != "got 42" || m.From() != "beta.bus" {
			t.Fatalf("reply %q from %q", m.Payload(), m.From())
		}
		if got := <-from; got != "alpha.bus" {
			t.Fatalf("the handler saw from %q", got)
		}
	})
}

// TestSendsAndRequestsGetTheSameOutcomes: a send's receipt and a
// request's typed error say the same thing whether the target is on the
// sender's broker, on another, or nowhere.
func TestSendsAndRequestsGetTheSameOutcomes(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		beta := connect(t, p.at(1), "beta")
		var in inbox
		if _, err := beta.Scope("s").Channel("ev").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
			t.Fatal(err)
		}
		p.sees(t, "beta")
		ch := alpha.Scope("s").Channel("ev")
		for target, want := range map[string]wire.Result{"beta": wire.Accepted, "ghost": wire.NotConnected} {
			r, _ := ch.Send(ctxT(t, 5*time.Second), target, nil)
			if r.Result != want {
				t.Fatalf("send to %s: %+v, want %s", target, r, want)
			}
		}
		if r, _ := alpha.Scope("s").Channel("other").Send(ctxT(t, 5*time.Second), "beta", nil); r.Result != wire.NoSubscriber {
			t.Fatalf("send to beta on a channel it does not hear: %+v", r)
		}
		testbroker.Eventually(t, 5*time.Second, "the accepted event delivered", func() bool { return in.Len() == 1 })
		if got := in.Get(0).From(); got != "alpha.bus" {
			t.Fatalf("event from %q", got)
		}
		for _, target := range []string{"beta", "ghost"} {
			if _, err := ch.Request(ctxT(t, 5*time.Second), target, nil); !errors.Is(err, client.ErrNoHandler) {
				t.Fatalf("request to %s: %v, want NO_HANDLER", target, err)
			}
		}
	})
}

// TestDeadlineCoversTheWholeWay: the handler gets what is left of the
// sender's deadline, never more, and the caller times out on time even
// when the handler never answers.
func TestDeadlineCoversTheWholeWay(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		beta := connect(t, p.at(1), "beta")
		left := make(chan time.Duration, 1)
		release := make(chan struct{})
		defer close(release)
		if _, err := beta.Scope("s").Channel("slow").Handle(ctxT(t, 5*time.Second), func(ctx context.Context, m *client.Message) ([]byte, error) {
			left <- time.Until(m.Deadline())
			<-release // never answers in time: the caller's deadline decides
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		p.sees(t, "beta")
		const budget = 400 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		if _, err := alpha.Scope("s").Channel("slow").Request(ctx, "beta", nil); !errors.Is(err, client.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("request: %v", err)
		}
		if d := <-left; d > budget || d <= 0 {
			t.Fatalf("the handler had %v left of a %v budget", d, budget)
		}
	})
}

// TestStreamsReachSubscribersOnEveryBroker: a stream message reaches
// every subscriber of its channel, on any broker, with its source.
func TestStreamsReachSubscribersOnEveryBroker(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		var ins [2]inbox
		for i, node := range []string{"beta", "gamma"} {
			c := connect(t, p.at(i+1), node)
			if _, err := c.Scope("s").Channel("ticks").Subscribe(ctxT(t, 5*time.Second), ins[i].Handler); err != nil {
				t.Fatal(err)
			}
		}
		p.sees(t, "beta:ticks", "gamma:ticks")
		if err := alpha.Scope("s").Channel("ticks").Emit(ctxT(t, 5*time.Second), []byte("t1")); err != nil {
			t.Fatal(err)
		}
		for i := range ins {
			testbroker.Eventually(t, 5*time.Second, "the tick at every subscriber", func() bool { return ins[i].Len() == 1 })
			if m := ins[i].Get(0); string(m.Payload()) != "t1" || m.From() != "alpha.bus" {
				t.Fatalf("subscriber %d got %q from %q", i, m.Payload(), m.From())
			}
		}
	})
}

// TestServiceNameReachesItsOneInstanceAnywhere: a bare service name
// reaches the one node that announces it, on whichever broker.
func TestServiceNameReachesItsOneInstanceAnywhere(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		beta := connect(t, p.at(1), "beta")
		ctx := ctxT(t, 5*time.Second)
		if _, err := beta.Scope("s").Channel("calc.add").Handle(ctx, echo); err != nil {
			t.Fatal(err)
		}
		if _, err := beta.Announce(ctx, wire.Announcement{Service: "calc", Channels: []string{"calc.add"}}); err != nil {
			t.Fatal(err)
		}
		testbroker.Await(t, busSettle, "calc to resolve from alpha", func() error {
			m, err := alpha.Scope("s").Channel("calc.add").Request(ctxT(t, 5*time.Second), "calc", []byte("1"))
			if err != nil {
				return err
			}
			if m.From() != "beta.bus" {
				t.Fatalf("calc answered from %q", m.From())
			}
			return nil
		})
	})
}

// TestPublishHasOneResultPerCandidateOfTheBus: a publication reaches the
// subscribers on every broker and answers with one result per candidate
// node, wherever it is connected, and the publisher's broker.
func TestPublishHasOneResultPerCandidateOfTheBus(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha, in := alphaAndSubscribedBeta(t, p)
		connect(t, p.at(2), "gamma")
		p.sees(t, "beta:news", "gamma")
		res, err := alpha.Scope("s").Channel("news").Publish(ctxT(t, 5*time.Second), []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		wantResults(t, res, map[string]wire.Result{p.at(0).Broker.Name(): wire.NoSubscriber, "alpha": wire.NoSubscriber, "beta": wire.Accepted, "gamma": wire.NoSubscriber})
		testbroker.Eventually(t, 5*time.Second, "the publication delivered", func() bool { return in.Len() == 1 })
		if m := in.Get(0); m.From() != "alpha.bus" || string(m.Payload()) != "hello" {
			t.Fatalf("beta got %q from %q", m.Payload(), m.From())
		}
	})
}

// TestPublicationAnswersBeforeItsDeadline: a candidate that never answers
// (its client stopped reading) costs the publisher nothing but that
// candidate's TIMED_OUT. The broker answers a little before the deadline
// they share (broker.MaxPublishAnswerLead), so the publisher gets every
// other node's result instead of a TIMEOUT of its own. That lead is 100
// ms, which a loaded machine can take to pass the answer on: a TIMEOUT is
// tried again, and a broker that answers only at the deadline fails
// every try.
func TestPublicationAnswersBeforeItsDeadline(t *testing.T) {
	opts := testOpts()
	opts.ReceiptTimeout = time.Minute // gamma stays a candidate however many tries it owes receipts for
	eachTopology(t, opts, func(t *testing.T, p placement) {
		alpha, _ := alphaAndSubscribedBeta(t, p)
		gamma, stuck := connectPausable(t, p.at(2), "gamma")
		if _, err := gamma.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
			t.Fatal(err)
		}
		p.sees(t, "beta:news", "gamma:news")
		stuck.Pause()

		const tries = 10
		for try := 1; ; try++ {
			res, err := alpha.Scope("s").Channel("news").Publish(ctxT(t, time.Second), []byte("hello"))
			if errors.Is(err, client.ErrTimeout) && try < tries {
				continue // the answer came, late: a slow machine's, or a broker's that answers at the deadline
			}
			if err != nil {
				t.Fatalf("publish, try %d of %d: %v (want results, gamma's TIMED_OUT among them)", try, tries, err)
			}
			wantResults(t, res, map[string]wire.Result{p.at(0).Broker.Name(): wire.NoSubscriber, "alpha": wire.NoSubscriber, "beta": wire.Accepted, "gamma": wire.TimedOut})
			return
		}
	})
}

// alphaAndSubscribedBeta connects alpha on the first broker and beta,
// subscribed to s/news, on the second.
func alphaAndSubscribedBeta(t *testing.T, p placement) (*client.Client, *inbox) {
	t.Helper()
	alpha := connect(t, p.at(0), "alpha")
	in := &inbox{}
	beta := connect(t, p.at(1), "beta")
	if _, err := beta.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	return alpha, in
}

// wantResults checks a publication's results, one per node.
func wantResults(t *testing.T, res client.PublishResult, want map[string]wire.Result) {
	t.Helper()
	got := map[string]wire.Result{}
	for _, r := range res.Results {
		got[r.Node] = r.Result
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(res.Results) != len(want) {
		t.Fatalf("results %v, want %v", res.Results, want)
	}
}
