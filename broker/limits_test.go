package broker_test

// Per-message limits the broker enforces whatever a client checks: payload
// size, id and channel length, ttl, and the number of nodes one
// publication may reach.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestMaxPayloadEdge: the broker enforces MaxPayload whatever a client
// checks: a body of exactly MaxPayload is routed, one byte more refused.
// (client's TestMaxPayloadEdge checks the client's own refusal.)
func TestMaxPayloadEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 1024})
	a := connect(t, e, "alpha")
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "raw", "local", e.Secrets["local"])
	for size, want := range map[int]wire.Result{1024: wire.Accepted, 1025: wire.Rejected} {
		id := fmt.Sprintf("e%d", size)
		r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, id).WithHeader(wire.HeaderTo, "alpha").WithBody(make([]byte, size)))
		if m := readReply(t, r, id); m.Value(wire.HeaderResult) != string(want) {
			t.Fatalf("raw %d bytes: %q", size, m)
		}
	}
}

// TestRawLimits: the broker's limits on what a node writes by hand: id
// and channel lengths at and past their edge, the ttl's syntax and range,
// and two open calls sharing an id.
func TestRawLimits(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha")
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "raw", "local", e.Secrets["local"])
	id64 := strings.Repeat("i", broker.MaxIDLen)
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, id64).WithHeader(wire.HeaderTo, "alpha"))
	if m := readReply(t, r, id64); m.Value(wire.HeaderResult) != string(wire.Accepted) {
		t.Fatalf("id of %d bytes: %q", broker.MaxIDLen, m)
	}
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, id64+"i").WithHeader(wire.HeaderTo, "alpha"))
	if m := r.Read(t); m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultMalformed) {
		t.Fatalf("id of %d bytes: %q", broker.MaxIDLen+1, m)
	}
	ch128 := strings.Repeat("c", auth.MaxChannelLen)
	for _, c := range []struct {
		id, channel, ttl string
		want             wire.Result
	}{
		{"c128", ch128, "", wire.NoSubscriber},
		{"c129", ch128 + "c", "", wire.Rejected},
		{"ttl-bad", "x", "soon", wire.Rejected},
		{"ttl-ok", "x", "4294967295", wire.Accepted},
	} {
		m := wire.New(wire.TypeEvent, c.channel).WithHeader(wire.HeaderID, c.id).WithHeader(wire.HeaderTo, "alpha")
		if c.ttl != "" {
			m.Set(wire.HeaderTTL, c.ttl)
		}
		r.Send(t, m)
		if got := readReply(t, r, c.id); got.Value(wire.HeaderResult) != string(c.want) {
			t.Errorf("%s: %q", c.id, got)
		}
	}
	// Two open calls may not share an id.
	hang := make(chan struct{})
	defer close(hang)
	if _, err := a.Scope("s").Channel("hang").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		<-hang
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	req := wire.New(wire.TypeRequest, "hang").WithHeader(wire.HeaderID, "dup").WithHeader(wire.HeaderTo, "alpha")
	r.Send(t, req)
	r.Send(t, req)
	if m := readReply(t, r, "dup"); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("duplicate id: %q", m)
	}
}

// TestMaxPublishCandidatesEdge: 256 candidates (the broker and 255 nodes)
// are served; one more node and the whole publication is refused before
// anything is dispatched. On a bus the nodes of every broker count.
func TestMaxPublishCandidatesEdge(t *testing.T) {
	opts := testOpts()
	opts.LeaseTimeout = time.Minute // the raw nodes send no heartbeats; a loaded machine takes a while to connect 255
	eachTopology(t, opts, testMaxPublishCandidatesEdge)
}

func testMaxPublishCandidatesEdge(t *testing.T, p placement) {
	e := p.at(0)
	pub := connect(t, e, "publisher", func(o *client.Options) { o.Workers = 1 }) // callbacks in arrival order
	var in inbox
	if _, err := pub.Scope("s").Channel("wide").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for i := range broker.MaxPublishCandidates - 2 { // + publisher + broker = 256
		at := p.at(i)
		r := at.DialRaw(t)
		nodes = append(nodes, fmt.Sprintf("n%d", i))
		if m := r.Hello(t, wire.ProtocolVersion, nodes[i], "local", at.Secrets["local"]); m.Value(wire.HeaderRC) != "0" {
			t.Fatal(m)
		}
	}
	p.sees(t, nodes...)
	res, err := pub.Scope("s").Channel("wide").Publish(ctxT(t, 10*time.Second), []byte("x"))
	if err != nil {
		t.Fatalf("256 candidates: %v", err)
	}
	if len(res.Results) != broker.MaxPublishCandidates {
		t.Fatalf("%d results", len(res.Results))
	}
	testbroker.Eventually(t, 5*time.Second, "delivery", func() bool { return in.Len() == 1 })
	other := p.at(1)
	r := other.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "one-more", "local", other.Secrets["local"])
	p.sees(t, "one-more")
	_, err = pub.Scope("s").Channel("wide").Publish(ctxT(t, 10*time.Second), []byte("y"))
	if !errors.Is(err, client.ErrRejected) || !strings.Contains(err.Error(), "257") {
		t.Fatalf("257 candidates: %v", err)
	}
	// A marker sent now is queued behind anything the refused publication
	// dispatched.
	if rc, _ := connect(t, e, "marker").Scope("s").Channel("wide").Send(ctxT(t, 5*time.Second), "publisher", []byte("marker")); rc.Result != wire.Accepted {
		t.Fatalf("marker: %+v", rc)
	}
	testbroker.Eventually(t, 5*time.Second, "the marker delivered", func() bool { return in.Len() >= 2 })
	if n, second := in.Len(), string(in.Get(1).Payload()); n != 2 || second != "marker" {
		t.Fatalf("a refused publication was dispatched: %d delivered, the second %q", n, second)
	}
}
