package moonbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
)

// slowAlpha is a node whose mb:slow handler answers only once the test
// releases it (or ends).
func (e *env) slowAlpha() (release func()) {
	c := e.node("alpha")
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	e.t.Cleanup(release)
	must(e.t)(c.Scope("app").Channel("mb:slow").Handle(ctxT(e.t, wait), func(_ context.Context, m *client.Message) ([]byte, error) {
		<-gate // not the call's deadline: this handler never answers in time
		return m.Payload(), nil
	}))
	return release
}

// A backend's deadline covers the whole operation: at the protocol's
// shortest timeout, and at a longer one, a handler that does not answer
// gives TIMED_OUT.
func TestBackendTimeout(t *testing.T) {
	e := start(t, nil)
	e.slowAlpha()
	b := e.register("island-a")
	alpha := BackendEndpoint("alpha")
	for _, ms := range []int64{MinTimeoutMillis, 50} {
		op, _ := b.message(KindRequest, "mb:slow", &alpha, ms, "x")
		if p := b.nextResponse(); p.OperationID != op || p.Type != ResponseError || p.Err.Code != CodeTimedOut {
			t.Fatalf("timeout %d ms: %+v", ms, p)
		}
	}
	// A timeout past the protocol's bounds is a malformed frame: the
	// session ends, as MoonBridge's proxy ends it.
	for _, ms := range []int64{MinTimeoutMillis - 1, MaxTimeoutMillis + 1} {
		b := e.register("island-b")
		frame, _ := EncodeMessage(MessageFrame{OperationID: 1, TimeoutMillis: 1, Message: Message{ID: NewUUID(), Kind: KindEvent,
			Channel: "mb:x", Source: BackendEndpoint("island-b"), Target: &alpha}})
		frame[9+7], frame[9+6], frame[9+5] = byte(ms), byte(ms>>8), byte(ms>>16)
		b.write(frame)
		b.closedWithoutFrame()
	}
}

// busbar's deadline reaches the backend as its MESSAGE's timeout, what is
// left of it: a request the backend does not answer in time times out
// for the caller, and the backend's late answer is dropped.
func TestBusTimeoutIncludesQueueing(t *testing.T) {
	e := start(t, nil)
	alpha, _ := e.alpha("alpha")
	b := e.register("island-a")
	const budget = 300 * time.Millisecond
	errs := make(chan error, 1)
	go func() {
		_, err := alpha.Scope("app").Channel("mb:ask").Request(ctxT(t, budget), "island-a", nil)
		errs <- err
	}()
	f := b.nextMessage()
	if f.TimeoutMillis < MinTimeoutMillis || f.TimeoutMillis > budget.Milliseconds() {
		t.Fatalf("timeout %d ms for a budget of %v", f.TimeoutMillis, budget)
	}
	if err := <-errs; !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("request: %v", err)
	}
	r := Message{ID: NewUUID(), Kind: KindReply, Channel: f.Message.Channel, Source: *f.Message.Target, Target: &f.Message.Source, ReplyTo: &f.Message.ID}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &r})
	b.write(EncodeEmpty(TypeHeartbeat))
	if v := b.next(); v != TypePong {
		t.Fatalf("after a late answer: %#v", v)
	}
}

// At most MaxInflight operations of a backend are open at once: the next
// is refused BACKPRESSURED at once, and the open ones complete.
func TestBackendInflightLimit(t *testing.T) {
	e := start(t, nil)
	release := e.slowAlpha()
	b := e.register("island-a")
	alpha := BackendEndpoint("alpha")
	for range MaxInflight {
		b.message(KindRequest, "mb:slow", &alpha, MaxTimeoutMillis, "x")
	}
	op, _ := b.message(KindRequest, "mb:slow", &alpha, MaxTimeoutMillis, "x")
	if p := b.nextResponse(); p.OperationID != op || p.Type != ResponseError || p.Err.Code != CodeBackpressured {
		t.Fatalf("operation %d: %+v", MaxInflight+1, p)
	}
	release()
	for range MaxInflight {
		if p := b.nextResponse(); p.Type != ResponseReply {
			t.Fatalf("after release: %+v", p)
		}
	}
	// Room again.
	if p, _ := b.call(KindRequest, "mb:slow", &alpha, "x"); p.Type != ResponseReply {
		t.Fatalf("after the open ones completed: %+v", p)
	}
}

// At most MaxInflight of busbar's operations are open towards a backend:
// the next request is OVERLOAD, the next event BACKPRESSURED.
func TestBusInflightLimit(t *testing.T) {
	e := start(t, nil)
	alpha, _ := e.alpha("alpha")
	b := e.register("island-a")
	ask := alpha.Scope("app").Channel("mb:ask")
	errs := make(chan error, MaxInflight)
	for range MaxInflight {
		go func() {
			_, err := ask.Request(ctxT(t, wait), "island-a", nil)
			errs <- err
		}()
	}
	var open []MessageFrame
	for range MaxInflight {
		open = append(open, b.nextMessage())
	}
	if _, err := ask.Request(ctxT(t, wait), "island-a", nil); !errors.Is(err, client.ErrOverload) {
		t.Fatalf("request %d: %v", MaxInflight+1, err)
	}
	if rc, _ := alpha.Scope("app").Channel("mb:news").Send(ctxT(t, wait), "island-a", nil); rc.Result != "BACKPRESSURED" {
		t.Fatalf("event past the limit: %+v", rc)
	}
	for _, f := range open {
		r := Message{ID: NewUUID(), Kind: KindReply, Channel: f.Message.Channel, Source: *f.Message.Target, Target: &f.Message.Source, ReplyTo: &f.Message.ID}
		b.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &r})
	}
	for range MaxInflight {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Messaging is live only: a backend that disconnects with operations open
// gets none of them again when it reconnects, and busbar's caller learns
// the node left.
func TestDisconnectWithoutReplay(t *testing.T) {
	e := start(t, nil)
	alpha, _ := e.alpha("alpha")
	release := e.slowAlpha2(alpha)
	b := e.register("island-a")
	errs := make(chan error, 1)
	go func() {
		_, err := alpha.Scope("app").Channel("mb:ask").Request(ctxT(t, wait), "island-a", nil)
		errs <- err
	}()
	b.nextMessage()
	target := BackendEndpoint("alpha")
	b.message(KindRequest, "mb:slow2", &target, MaxTimeoutMillis, "x") // open when it leaves
	b.nc.Close()
	if err := <-errs; err == nil {
		t.Fatal("the request to a backend that left succeeded")
	}
	again := e.register("island-a")
	release()
	again.write(EncodeEmpty(TypeHeartbeat))
	if v := again.next(); v != TypePong {
		t.Fatalf("the reconnected backend got %#v before its PONG", v)
	}
}

// slowAlpha2 adds a gated handler on mb:slow2 to c.
func (e *env) slowAlpha2(c *client.Client) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	e.t.Cleanup(release)
	must(e.t)(c.Scope("app2").Channel("mb:slow2").Handle(ctxT(e.t, wait), func(context.Context, *client.Message) ([]byte, error) {
		<-gate
		return nil, nil
	}))
	return release
}

// Old-connection isolation: when the same instance registers again (a
// new generation), its older connection is closed, what was open on it
// fails, and the newer one is a new busbar node epoch that owes nothing.
func TestOldConnectionIsolation(t *testing.T) {
	e := start(t, nil)
	alpha, _ := e.alpha("alpha")
	old := e.register("island-a")
	errs := make(chan error, 1)
	go func() {
		_, err := alpha.Scope("app").Channel("mb:ask").Request(ctxT(t, wait), "island-a", nil)
		errs <- err
	}()
	f := old.nextMessage()
	fresh := e.register("island-a")
	if fresh.reg.Epoch <= old.reg.Epoch {
		t.Fatalf("epoch %d after %d", fresh.reg.Epoch, old.reg.Epoch)
	}
	old.closedWithoutFrame()
	if err := <-errs; err == nil {
		t.Fatal("a request open on the old connection succeeded")
	}
	// The newer connection never sees the older one's operation.
	go func() {
		_, err := alpha.Scope("app").Channel("mb:ask").Request(ctxT(t, wait), "island-a", []byte("new"))
		errs <- err
	}()
	g := fresh.nextMessage()
	if g.Message.ID == f.Message.ID || string(g.Message.Payload) != "new" {
		t.Fatalf("the new connection got %+v", g.Message)
	}
	r := Message{ID: NewUUID(), Kind: KindReply, Channel: g.Message.Channel, Source: *g.Message.Target, Target: &g.Message.Source, ReplyTo: &g.Message.ID}
	fresh.respond(Response{OperationID: g.OperationID, Type: ResponseReply, Reply: &r})
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// Payloads at and past MoonBridge's 64 KiB, stricter than busbar's 1 MiB:
// busbar's that a backend cannot take are refused, never cut.
func TestPayloadLimit(t *testing.T) {
	e := start(t, nil)
	alpha := e.node("alpha")
	must(t)(alpha.Scope("app").Channel("mb:ask").Handle(ctxT(t, wait), func(_ context.Context, m *client.Message) ([]byte, error) {
		return make([]byte, len(m.Payload())), nil // as long as the request's
	}))
	b := e.register("island-a")
	ch := alpha.Scope("app").Channel("mb:news")
	got := make(chan client.Receipt, 1)
	go func() { rc, _ := ch.Send(ctxT(t, wait), "island-a", make([]byte, MaxPayloadBytes)); got <- rc }()
	f := b.nextMessage()
	if len(f.Message.Payload) != MaxPayloadBytes {
		t.Fatalf("payload of %d bytes", len(f.Message.Payload))
	}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: Accepted})
	if rc := <-got; rc.Result != "ACCEPTED" {
		t.Fatalf("64 KiB: %+v", rc)
	}
	if rc, _ := ch.Send(ctxT(t, wait), "island-a", make([]byte, MaxPayloadBytes+1)); rc.Result != "REJECTED" {
		t.Fatalf("64 KiB + 1: %+v", rc)
	}
	// A reply past the limit: the backend's request fails REJECTED.
	target := BackendEndpoint("alpha")
	op, _ := b.message(KindRequest, "mb:ask", &target, MaxTimeoutMillis, string(make([]byte, MaxPayloadBytes)))
	if p := b.nextResponse(); p.OperationID != op || p.Type != ResponseReply || len(p.Reply.Payload) != MaxPayloadBytes {
		t.Fatalf("a 64 KiB reply: %+v", p.Type)
	}
	must(t)(alpha.Scope("big").Channel("mb:big").Handle(ctxT(t, wait), func(context.Context, *client.Message) ([]byte, error) {
		return make([]byte, MaxPayloadBytes+1), nil
	}))
	if p, _ := b.call(KindRequest, "mb:big", &target, ""); p.Type != ResponseError || p.Err.Code != CodeRejected {
		t.Fatalf("a reply of 64 KiB + 1: %+v", p)
	}
}

// A backend that sends heartbeats and reads nothing fills its write queue
// (MaxWriteQueue PONGs behind a full socket): it is disconnected as not
// reading, and logged.
func TestWriteQueueFull(t *testing.T) {
	e := start(t, nil)
	b := e.register("island-a")
	if tc, ok := b.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(1024) // the least the kernel allows: the queue fills sooner
	}
	batch := bytes.Repeat([]byte{0, 0, 0, 1, TypeHeartbeat}, 4096)
	for {
		if _, err := b.nc.Write(batch); err != nil {
			break // the broker closed the connection
		}
	}
	testbroker.Eventually(t, wait, "the disconnect logged", func() bool { return strings.Contains(e.log.String(), errSlow.Error()) })
}

// A backend's publication reaches at most 256 candidate nodes (MoonBridge's
// MAX_PUBLISH_RESULTS, busbar's MaxPublishCandidates), the proxy and the
// publisher included: at 256 it is answered with a result each, at 257 it
// is refused whole.
func TestPublishCandidateLimit(t *testing.T) {
	e := start(t, nil)
	b := e.register("island-a")
	// The broker and island-a are two candidates; these nodes the rest.
	connectN := func(n, from int) {
		for i := range n {
			testclient.Connect(t, e.bus, fmt.Sprintf("n%d", from+i), func(o *client.Options) {
				o.Dial = func(context.Context) (net.Conn, error) { return e.bus.Broker.DialInProcess() }
			})
		}
	}
	connectN(MaxPublishResults-2, 0)
	op, _ := b.message(KindEvent, "mb:news", nil, MaxTimeoutMillis, "all")
	self := b.nextMessage()
	b.respond(Response{OperationID: self.OperationID, Type: ResponseSend, Result: NoSubscriber})
	if p := b.nextResponse(); p.OperationID != op || p.Type != ResponsePublish || len(p.Results) != MaxPublishResults {
		t.Fatalf("at %d candidates: %+v results", MaxPublishResults, len(p.Results))
	}
	connectN(1, MaxPublishResults)
	op, _ = b.message(KindEvent, "mb:news", nil, MaxTimeoutMillis, "all")
	if p := b.nextResponse(); p.OperationID != op || p.Type != ResponseError || p.Err.Code != CodeRejected {
		t.Fatalf("at %d candidates: %+v", MaxPublishResults+1, p)
	}
}
