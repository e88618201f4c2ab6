package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testclient"
	"busbar/wire"
)

// TestPublicationAnswersBeforeItsDeadline: a candidate that never answers
// (its client stopped reading) costs the publisher nothing but that
// candidate's TIMED_OUT. The broker answers a little before the deadline
// they share (broker.MaxPublishAnswerLead), so the publisher gets every
// other node's result instead of a TIMEOUT of its own.
func TestPublicationAnswersBeforeItsDeadline(t *testing.T) {
	eachTopology(t, testOpts(), func(t *testing.T, p placement) {
		alpha := connect(t, p.at(0), "alpha")
		var in inbox
		beta := connect(t, p.at(1), "beta")
		if _, err := beta.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
			t.Fatal(err)
		}
		gamma, stuck := testclient.ConnectPausable(t, p.at(2), "gamma")
		if _, err := gamma.Scope("s").Channel("news").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
			t.Fatal(err)
		}
		p.sees(t, "beta:news", "gamma:news")
		stuck.Pause()

		res, err := alpha.Scope("s").Channel("news").Publish(ctxT(t, time.Second), []byte("hello"))
		if err != nil {
			t.Fatalf("publish: %v (want results, gamma's TIMED_OUT among them)", err)
		}
		got := map[string]wire.Result{}
		for _, r := range res.Results {
			got[r.Node] = r.Result
		}
		want := map[string]wire.Result{p.at(0).Broker.Name(): wire.NoSubscriber, "alpha": wire.NoSubscriber, "beta": wire.Accepted, "gamma": wire.TimedOut}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(res.Results) != len(want) {
			t.Fatalf("results %v, want %v", res.Results, want)
		}
	})
}
