package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/ops"
)

// Messages of every kind cross a real broker over TCP; /metrics and the
// status count them by kind, their receipts and request errors by
// result, the failed login by reason, and time the sampled ones.
func TestMetricsCountMessagesByKindAndResult(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{})
	srv := opsServer(t, e, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sub := testclient.Connect(t, e, "sub")
	var inbox testclient.Inbox
	if _, err := sub.Scope("p").Channel("orders").Subscribe(ctx, inbox.Handler); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Scope("p").Channel("math").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		if string(m.Payload()) == "fail" {
			return nil, errors.New("cannot")
		}
		return m.Payload(), nil
	}); err != nil {
		t.Fatal(err)
	}
	// asker's first routed message is a request: the first of a
	// connection is always sampled, so its round trip is timed.
	asker := testclient.Connect(t, e, "asker")
	if _, err := asker.Scope("p").Channel("math").Request(ctx, "sub", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	var he *client.RequestError
	if _, err := asker.Scope("p").Channel("math").Request(ctx, "sub", []byte("fail")); !errors.As(err, &he) {
		t.Fatalf("a failing handler: %v", err)
	}
	if _, err := asker.Scope("p").Channel("nothing").Request(ctx, "sub", []byte("x")); !errors.As(err, &he) {
		t.Fatalf("no handler: %v", err)
	}

	pub := testclient.Connect(t, e, "pub")
	orders := pub.Scope("p").Channel("orders")
	const streams, sends = 5, 3
	for i := range streams {
		if err := orders.Emit(ctx, []byte("s"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for range sends {
		if r, err := orders.Send(ctx, "sub", []byte("send")); err != nil || r.Result != "ACCEPTED" {
			t.Fatalf("send: %+v %v", r, err)
		}
	}
	if _, err := orders.Publish(ctx, []byte("pub")); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "the streams delivered", func() bool { return inbox.Len() == streams+sends+1 })
	if _, err := testclient.DialClient(e, "intruder", func(o *client.Options) { o.Credential = auth.Credential{Principal: "local", Secret: "wrong"} }); err == nil {
		t.Fatal("a wrong secret connected")
	}

	want := map[string]string{
		`busbar_messages_in_total{kind="stream"}`:              strconv.Itoa(streams),
		`busbar_messages_out_total{kind="stream"}`:             strconv.Itoa(streams),
		`busbar_messages_in_total{kind="send"}`:                strconv.Itoa(sends),
		`busbar_messages_out_total{kind="send"}`:               strconv.Itoa(sends),
		`busbar_messages_in_total{kind="publish"}`:             "1",
		`busbar_messages_in_total{kind="request"}`:             "3",
		`busbar_messages_out_total{kind="request"}`:            "2", // one had no handler
		`busbar_messages_in_total{kind="response"}`:            "2",
		`busbar_messages_in_total{kind="receipt"}`:             strconv.Itoa(sends + 1),
		`busbar_receipts_total{result="accepted"}`:             strconv.Itoa(sends + 1),
		`busbar_receipts_total{result="timed_out"}`:            "0",
		`busbar_request_errors_total{result="handler_failed"}`: "1",
		`busbar_request_errors_total{result="no_handler"}`:     "1",
		`busbar_request_errors_total{result="timeout"}`:        "0",
		`busbar_handshake_failures_total{reason="auth"}`:       "1",
		`busbar_handshake_failures_total{reason="version"}`:    "0",
		`busbar_request_round_trip_seconds_count`:              "1",
		`busbar_request_round_trip_seconds_bucket{le="+Inf"}`:  "1",
		`busbar_queued_messages`:                               "0",
		`busbar_state_writes_total`:                            "0",
		`busbar_relay_inbox_blobs_count`:                       "", // not a relay
	}
	testbroker.Await(t, 5*time.Second, "the counts", func() error {
		_, exp, _ := get(t, srv, ops.MetricsPath, "Bearer "+testToken)
		for series, v := range want {
			if got := metric(exp, series); got != v {
				return fmt.Errorf("%s = %q, want %s", series, got, v)
			}
		}
		for _, series := range []string{`busbar_bytes_in_total{kind="stream"}`, `busbar_bytes_out_total{kind="stream"}`,
			`busbar_routing_latency_seconds_count`, `busbar_messages_out_total{kind="receipt"}`} {
			if n, err := strconv.ParseFloat(metric(exp, series), 64); err != nil || n <= 0 {
				return fmt.Errorf("%s = %q, want more than 0", series, metric(exp, series))
			}
		}
		return nil
	})

	_, js, _ := get(t, srv, ops.StatusPath, "Bearer "+testToken)
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	tr := st.Traffic
	if tr.In["stream"].Msgs != streams || tr.In["stream"].Bytes == 0 || tr.RequestErrors["HANDLER_FAILED"] != 1 ||
		tr.RoundTrip.Count != 1 || len(tr.RoundTrip.Counts) != len(tr.RoundTrip.Bounds)+1 || len(tr.Channels) == 0 {
		t.Fatalf("status traffic: %+v", tr)
	}
}

// A state write counts, and the dashboard's feed of events shows it.
func TestStateWritesAreCountedAndListed(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, "")
	owner := testclient.Connect(t, e, "owner")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := owner.State("inventory").Set(ctx, "widgets", 3); err != nil {
		t.Fatal(err)
	}
	_, exp, _ := get(t, srv, ops.MetricsPath, "Bearer "+testToken)
	if got := metric(exp, "busbar_state_writes_total"); got != "1" {
		t.Fatalf("busbar_state_writes_total = %q", got)
	}
	evs := e.Broker.Events(0)
	if len(evs) != 1 || evs[0].Kind != broker.EventState || evs[0].Subject != "inventory" || evs[0].Key != "widgets" || evs[0].Node != "owner" {
		t.Fatalf("events: %+v", evs)
	}
	keys, ok := e.Broker.NamespaceKeys("inventory", 1)
	if !ok || len(keys) != 1 || keys[0].Key != "widgets" || keys[0].Value != "3" {
		t.Fatalf("keys: %+v %v", keys, ok)
	}
	if _, ok := e.Broker.NamespaceKeys("inventory", 0); ok {
		t.Fatal("a namespace over the limit was listed")
	}
}
