package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
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

func TestMaxPayloadEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 1024})
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	ch := b.Scope("s").Channel("x")
	if r, _ := ch.Send(ctxT(t, 5*time.Second), "alpha", make([]byte, 1024)); r.Result != wire.Accepted {
		t.Fatalf("at the limit: %+v", r)
	}
	if _, err := ch.Send(ctxT(t, 5*time.Second), "alpha", make([]byte, 1025)); !errors.Is(err, client.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("past the limit: %v", err)
	}
	// The broker enforces it too, whatever a client checks.
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

// readReply reads until the answer to id arrives (receipts of the node's
// own deliveries may interleave).
func readReply(t *testing.T, r *testbroker.Raw, id string) *wire.Message {
	t.Helper()
	for {
		m := r.Read(t)
		if m.Value(wire.HeaderReplyTo) == id {
			return m
		}
	}
}

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

func TestMaxInflightEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxInflight: 2})
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 4 })
	b := connect(t, e, "beta")
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	if _, err := a.Scope("s").Channel("hang").Handle(ctxT(t, 5*time.Second), func(context.Context, *client.Message) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := b.Scope("s").Channel("hang").Request(ctxT(t, 10*time.Second), "alpha", nil)
			errs <- err
		}()
	}
	<-entered
	<-entered // two calls open: the limit
	_, err := b.Scope("s").Channel("hang").Request(ctxT(t, 5*time.Second), "alpha", nil)
	if !errors.Is(err, client.ErrOverload) {
		t.Fatalf("third call: %v", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Below the limit again.
	if _, err := b.Scope("s").Channel("hang").Request(ctxT(t, 5*time.Second), "alpha", nil); err != nil {
		t.Fatal(err)
	}
}

// TestMaxPublishCandidatesEdge: 256 candidates (the broker and 255 nodes)
// are served; one more node and the whole publication is refused before
// anything is dispatched.
func TestMaxPublishCandidatesEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	pub := connect(t, e, "publisher")
	var in inbox
	if _, err := pub.Scope("s").Channel("wide").Subscribe(ctxT(t, 5*time.Second), in.handler); err != nil {
		t.Fatal(err)
	}
	for i := range broker.MaxPublishCandidates - 2 { // + publisher + broker = 256
		r := e.DialRaw(t)
		if m := r.Hello(t, wire.ProtocolVersion, fmt.Sprintf("n%d", i), "local", e.Secrets["local"]); m.Value(wire.HeaderRC) != "0" {
			t.Fatal(m)
		}
	}
	res, err := pub.Scope("s").Channel("wide").Publish(ctxT(t, 10*time.Second), []byte("x"))
	if err != nil {
		t.Fatalf("256 candidates: %v", err)
	}
	if len(res.Results) != broker.MaxPublishCandidates {
		t.Fatalf("%d results", len(res.Results))
	}
	testbroker.Eventually(t, 5*time.Second, "delivery", func() bool { return in.len() == 1 })
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "one-more", "local", e.Secrets["local"])
	_, err = pub.Scope("s").Channel("wide").Publish(ctxT(t, 10*time.Second), []byte("y"))
	if !errors.Is(err, client.ErrRejected) || !strings.Contains(err.Error(), "257") {
		t.Fatalf("257 candidates: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if in.len() != 1 {
		t.Fatal("a refused publication was dispatched")
	}
}

func TestGracefulShutdown(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{DrainTimeout: 5 * time.Second})
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
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

func TestMaxConnectionsEdge(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxConnections: 2})
	connect(t, e, "alpha")
	connect(t, e, "beta") // at the limit
	if _, err := dialClient(e, "gamma"); err == nil {
		t.Fatal("a third connection was served")
	}
	if e.Broker.Stats().OverCapacity != 1 {
		t.Fatal("refusal not counted")
	}
}

// TestFrameLimitFollowsMaxPayload: the broker refuses, before reading it,
// a frame longer than MaxPayload + MaxFrameOverhead; a frame at that size
// is read (and its too-large payload refused as a message).
func TestFrameLimitFollowsMaxPayload(t *testing.T) {
	const maxPayload = 1024
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: maxPayload})
	limit := maxPayload + broker.MaxFrameOverhead
	frame := func(size int) []byte {
		t.Helper()
		m := wire.New(wire.TypeRequest, "x").WithHeader(wire.HeaderID, "r1").WithHeader(wire.HeaderTo, "nobody")
		base := len(m.ToBytes())
		b := m.WithBody(bytes.Repeat([]byte("p"), size-base)).ToBytes()
		if len(b) != size {
			t.Fatalf("built %d bytes, want %d", len(b), size)
		}
		return append(binary.BigEndian.AppendUint32(nil, uint32(size)), b...)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "big", "local", e.Secrets["local"])
	r.SendBytes(t, frame(limit))
	if m := r.Read(t); m.Value(wire.HeaderReplyTo) != "r1" || m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("a frame at the limit: %q", m)
	}
	r.SendBytes(t, binary.BigEndian.AppendUint32(nil, uint32(limit+1)))
	if m := r.Read(t); m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) {
		t.Fatalf("a frame one byte past the limit: %q", m)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("connection still open after an oversize frame")
	}
}
