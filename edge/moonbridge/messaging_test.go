package moonbridge

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"

	"busbar/auth"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/wire"
)

// must fails the test on a call's error: must(t)(f()).
func must(t testing.TB) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// alpha is a busbar node with a subscriber on mb:news and handlers on
// mb:ask (echo) and mb:fail.
func (e *env) alpha(name string) (*client.Client, *testclient.Inbox) {
	c := e.node(name)
	in := &testclient.Inbox{}
	s := c.Scope("app")
	must(e.t)(s.Channel("mb:news").Subscribe(ctxT(e.t, wait), in.Handler))
	must(e.t)(s.Channel("mb:ask").Handle(ctxT(e.t, wait), func(_ context.Context, m *client.Message) ([]byte, error) {
		return append([]byte("re:"), m.Payload()...), nil
	}))
	must(e.t)(s.Channel("mb:fail").Handle(ctxT(e.t, wait), func(context.Context, *client.Message) ([]byte, error) {
		return nil, errors.New("boom")
	}))
	return c, in
}

// A backend's send, request and publish reach busbar nodes, with
// MoonBridge's receipts, errors and per-candidate results.
func TestBackendToBus(t *testing.T) {
	e := start(t, nil)
	_, in := e.alpha("alpha")
	b := e.register("island-a")
	alpha := BackendEndpoint("alpha")

	sends := []struct {
		name    string
		channel string
		target  Endpoint
		want    SendResult
	}{
		{"accepted", "mb:news", alpha, Accepted},
		{"no subscriber", "mb:quiet", alpha, NoSubscriber},
		{"not connected", "mb:news", BackendEndpoint("nobody"), NotConnected},
		{"a name no busbar node has", "mb:news", BackendEndpoint("No Such Name"), NotConnected},
		{"not permitted to send", "other:news", alpha, Rejected},
		{"reserved channel", "bus:news", alpha, Rejected},
		{"the proxy, with nobody there", "mb:news", ProxyEndpoint(), NoSubscriber},
	}
	for _, c := range sends {
		p, _ := b.call(KindEvent, c.channel, &c.target, "hi")
		if p.Type != ResponseSend || p.Result != c.want {
			t.Errorf("send %s: %+v, want %s", c.name, p, c.want)
		}
	}
	testbroker.Eventually(t, wait, "alpha event", func() bool { return in.Len() == 1 })
	if m := in.Get(0); m.From() != "island-a.bus" || string(m.Payload()) != "hi" || m.Channel() != "mb:news" {
		t.Fatalf("alpha got %s from %s", m.Payload(), m.From())
	}

	p, req := b.call(KindRequest, "mb:ask", &alpha, "hi")
	if p.Type != ResponseReply || !validReply(&req, p.Reply) || string(p.Reply.Payload) != "re:hi" {
		t.Fatalf("request: %+v", p)
	}
	for _, c := range []struct {
		channel string
		target  Endpoint
		want    ErrorCode
	}{
		{"mb:nobody-handles", alpha, CodeNoHandler},
		{"mb:fail", alpha, CodeHandlerFailed},
		{"other:ask", alpha, CodeRejected},
		{"mb:ask", BackendEndpoint("No Such Name"), CodeNotConnected},
	} {
		p, _ := b.call(KindRequest, c.channel, &c.target, "hi")
		if p.Type != ResponseError || p.Err.Code != c.want {
			t.Errorf("request on %s to %s: %+v, want %s", c.channel, c.target, p, c.want)
		}
	}

	// A publication visits the proxy, alpha, and the backend itself,
	// whose own answer is its result.
	op, pub := b.message(KindEvent, "mb:news", nil, MaxTimeoutMillis, "all")
	self := b.nextMessage()
	if self.Message.ID != pub.ID || self.Message.Source != BackendEndpoint("island-a") || *self.Message.Target != BackendEndpoint("island-a") {
		t.Fatalf("the publisher's own copy: %+v", self.Message)
	}
	b.respond(Response{OperationID: self.OperationID, Type: ResponseSend, Result: NoSubscriber})
	p = b.nextResponse()
	want := map[Endpoint]SendResult{ProxyEndpoint(): NoSubscriber, alpha: Accepted, BackendEndpoint("island-a"): NoSubscriber}
	if p.OperationID != op || p.Type != ResponsePublish || p.MessageID != pub.ID || !reflect.DeepEqual(results(p), want) {
		t.Fatalf("publish: %+v", p)
	}
	p, _ = b.call(KindEvent, "other:news", nil, "x")
	if p.Type != ResponseError || p.Err.Code != CodeRejected {
		t.Fatalf("publish without permission: %+v", p)
	}
}

func results(p Response) map[Endpoint]SendResult {
	m := map[Endpoint]SendResult{}
	for _, r := range p.Results {
		m[r.Endpoint] = r.Result
	}
	return m
}

// A busbar node's send, request and publish reach the backend, and what
// the backend answers is what the node gets.
func TestBusToBackend(t *testing.T) {
	e := start(t, nil)
	alpha, _ := e.alpha("alpha")
	b := e.register("island-a")
	ch := alpha.Scope("app").Channel("mb:news")
	island := BackendEndpoint("island-a")

	for r := Accepted; r <= Failed; r++ {
		got := make(chan client.Receipt, 1)
		go func() { rc, _ := ch.Send(ctxT(t, wait), "island-a", []byte("ev")); got <- rc }()
		f := b.nextMessage()
		m := f.Message
		if m.Kind != KindEvent || m.Source != BackendEndpoint("alpha") || *m.Target != island || m.Channel != "mb:news" || string(m.Payload) != "ev" || f.TimeoutMillis > MaxTimeoutMillis {
			t.Fatalf("event: %+v", f)
		}
		b.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: r})
		want := busReceipt(r)
		if rc := <-got; rc.Result != want || rc.ID != m.ID.String() {
			t.Errorf("backend answered %s: receipt %+v, want %s", r, rc, want)
		}
	}

	ask := alpha.Scope("app").Channel("mb:ask")
	type answer struct {
		m   *client.Message
		err error
	}
	request := func() (chan answer, MessageFrame) {
		got := make(chan answer, 1)
		go func() { m, err := ask.Request(ctxT(t, wait), "island-a", []byte("q")); got <- answer{m, err} }()
		return got, b.nextMessage()
	}
	got, f := request()
	if f.Message.Kind != KindRequest || f.Message.Source != BackendEndpoint("alpha") || string(f.Message.Payload) != "q" {
		t.Fatalf("request: %+v", f)
	}
	asker, reqID := f.Message.Source, f.Message.ID
	reply := Message{ID: NewUUID(), Kind: KindReply, Channel: "mb:ask", Source: island, Target: &asker, ReplyTo: &reqID, Payload: []byte("a")}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &reply})
	if a := <-got; a.err != nil || string(a.m.Payload()) != "a" || a.m.From() != "island-a.bus" || a.m.ID() != reply.ID.String() || a.m.ReplyTo() != f.Message.ID.String() {
		t.Fatalf("reply: %+v %v", a.m, a.err)
	}
	for code, want := range map[ErrorCode]error{
		CodeNoHandler: client.ErrNoHandler, CodeClosed: client.ErrNoHandler, CodeBackpressured: client.ErrOverload,
		CodeHandlerFailed: client.ErrHandlerFailed,
		// Each as it is: an edge's node may claim these too.
		CodeTimedOut: client.ErrTimeout, CodeNotConnected: client.ErrNotConnected, CodeRejected: client.ErrRejected,
		CodeProtocolError: client.ErrProtocol,
	} {
		got, f := request()
		b.respond(Response{OperationID: f.OperationID, Type: ResponseError, Err: Error{Code: code, Detail: "why"}})
		if a := <-got; !errors.Is(a.err, want) {
			t.Errorf("backend failed %s: %v, want %v", code, a.err, want)
		}
	}
	// A reply that does not match its request is PROTOCOL_ERROR.
	got, f = request()
	bad := reply
	b.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &bad})
	if a := <-got; !errors.Is(a.err, client.ErrProtocol) {
		t.Fatalf("mismatched reply: %v", a.err)
	}
	// A channel the principal handles by pattern only (mb:*) reaches the
	// backend too, which answers it or says NO_HANDLER, as MoonBridge's
	// proxy forwards any request on a channel the backend may receive.
	other := make(chan error, 1)
	go func() {
		_, err := alpha.Scope("app").Channel("mb:other").Request(ctxT(t, wait), "island-a", nil)
		other <- err
	}()
	f = b.nextMessage()
	if f.Message.Channel != "mb:other" || f.Message.Kind != KindRequest {
		t.Fatalf("request on a channel handled by pattern: %+v", f)
	}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseError, Err: Error{Code: CodeNoHandler, Detail: "no handler"}})
	if err := <-other; !errors.Is(err, client.ErrNoHandler) {
		t.Fatalf("request on a channel handled by pattern only: %v", err)
	}

	pubs := make(chan client.PublishResult, 1)
	go func() { r, _ := ch.Publish(ctxT(t, wait), []byte("all")); pubs <- r }()
	f = b.nextMessage()
	b.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: Accepted})
	r := <-pubs
	if !hasResult(r, "island-a", wire.Accepted) || !hasResult(r, "alpha", wire.Accepted) {
		t.Fatalf("publish: %+v", r)
	}
}

func hasResult(r client.PublishResult, node string, want wire.Result) bool {
	for _, n := range r.Results {
		if n.Node == node {
			return n.Result == want
		}
	}
	return false
}

// The proxy endpoint is the broker's own node by default (code embedded
// in the broker), or the node Config.ProxyNode names.
func TestProxyEndpoint(t *testing.T) {
	e := start(t, nil)
	self := testclient.Connect(t, e.bus, e.bus.Broker.Name(), func(o *client.Options) {
		o.Dial = func(context.Context) (net.Conn, error) { return e.bus.Broker.DialInProcess() }
	})
	must(t)(self.Scope("core").Channel("mb:ask").Handle(ctxT(t, wait), func(_ context.Context, m *client.Message) ([]byte, error) {
		return []byte("from the proxy"), nil
	}))
	b := e.register("island-a")
	proxy := ProxyEndpoint()
	p, req := b.call(KindRequest, "mb:ask", &proxy, "q")
	if p.Type != ResponseReply || !validReply(&req, p.Reply) || p.Reply.Source != proxy {
		t.Fatalf("request to the proxy: %+v", p)
	}
	// The proxy asks the backend: its source is the proxy endpoint.
	go func() { _, _ = self.Scope("core").Channel("mb:ask").Request(ctxT(t, wait), "island-a", nil) }()
	if f := b.nextMessage(); f.Message.Source != proxy {
		t.Fatalf("from the proxy: %+v", f.Message)
	}

	hub := start(t, func(c *Config) { c.ProxyNode = "hub" })
	hubNode, _ := hub.alpha("hub")
	_ = hubNode
	hb := hub.register("island-a")
	p, req = hb.call(KindRequest, "mb:ask", &proxy, "q")
	if p.Type != ResponseReply || string(p.Reply.Payload) != "re:q" || !validReply(&req, p.Reply) {
		t.Fatalf("request to --moonbridge-proxy hub: %+v", p)
	}
}

// Backend to backend, through busbar: sources and replies as MoonBridge's
// router gives them, and concurrent responses matched to their requests.
func TestBackendToBackend(t *testing.T) {
	e := start(t, nil)
	a := e.register("island-a")
	bb := e.register("island-b")
	target := BackendEndpoint("island-b")
	const n = 16
	ops := map[int64]Message{}
	for i := range n {
		op, m := a.message(KindRequest, "mb:ask", &target, MaxTimeoutMillis, string(rune('a'+i)))
		ops[op] = m
	}
	var got []MessageFrame
	for range n {
		got = append(got, bb.nextMessage())
	}
	// Answered in reverse order: each reply still finds its request.
	for i := len(got) - 1; i >= 0; i-- {
		f := got[i]
		if f.Message.Source != BackendEndpoint("island-a") {
			t.Fatalf("source %s", f.Message.Source)
		}
		r := Message{ID: NewUUID(), Kind: KindReply, Channel: f.Message.Channel, Source: target, Target: &f.Message.Source,
			ReplyTo: &f.Message.ID, Payload: append([]byte("re:"), f.Message.Payload...)}
		bb.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &r})
	}
	for range n {
		p := a.nextResponse()
		req, ok := ops[p.OperationID]
		if !ok || p.Type != ResponseReply || !validReply(&req, p.Reply) || string(p.Reply.Payload) != "re:"+string(req.Payload) {
			t.Fatalf("reply %+v to %+v", p, req)
		}
		delete(ops, p.OperationID)
	}
}

// The listener driven with bytes written out by hand, not by the encoder:
// a send from island-a to alpha on mb:news, operation 7, 5000 ms, payload
// "hi", answered ACCEPTED in exactly MoonBridge's bytes.
func TestListenerBytes(t *testing.T) {
	e := start(t, nil)
	e.alpha("alpha")
	b := e.register("island-a")
	b.write(h(t, "09 0000000000000007 0000000000001388 | "+uuidA+" 01 | 0007 6d623a6e657773 | 00 0008 69736c616e642d61 | "+
		"01 00 0005 616c706861 | 00 | 00000002 6869"))
	f, err := ReadFrame(b.r)
	if err != nil {
		t.Fatal(err)
	}
	if want := h(t, "0a 0000000000000007 01 01"); !bytes.Equal(f, want) {
		t.Fatalf("answer %x, want %x", f, want)
	}
}

// Fan-out: busbar's publication visits every backend permitted to
// receive it, each answering for itself, and the node that published.
func TestFanOut(t *testing.T) {
	e := start(t, nil)
	alpha, in := e.alpha("alpha")
	backends := []*backend{e.register("island-a"), e.register("island-b"), e.register("island-c")}
	answers := []SendResult{Accepted, NoSubscriber, Backpressured}
	got := make(chan client.PublishResult, 1)
	go func() {
		r, _ := alpha.Scope("app").Channel("mb:news").Publish(ctxT(t, wait), []byte("all"))
		got <- r
	}()
	for i, b := range backends {
		f := b.nextMessage()
		if string(f.Message.Payload) != "all" || f.Message.Source != BackendEndpoint("alpha") || *f.Message.Target != BackendEndpoint(b.name) {
			t.Fatalf("%s got %+v", b.name, f.Message)
		}
		b.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: answers[i]})
	}
	r := <-got
	for i, b := range backends {
		if !hasResult(r, b.name, busReceipt(answers[i])) {
			t.Fatalf("%s: %+v", b.name, r)
		}
	}
	if !hasResult(r, "alpha", wire.Accepted) {
		t.Fatalf("the publisher: %+v", r)
	}
	testbroker.Eventually(t, wait, "alpha's own copy", func() bool { return in.Len() == 1 })
}

// A busbar channel a MoonBridge backend cannot carry (the dotted form) is
// reported, never rewritten: an event on one is REJECTED, a request fails
// with REJECTED and the reason in its text.
func TestDottedChannelRefused(t *testing.T) {
	wide := auth.Principal{Name: "wide", Nodes: []auth.Pattern{"wide-*"}, MoonBridge: &auth.MoonBridgeKey{KeyID: "wide", Secret: secretA},
		Permissions: auth.Permissions{Subscribe: []auth.Pattern{">"}, Handle: []auth.Pattern{"orders.ask"}}}
	e := start(t, nil, wide)
	alpha := e.node("alpha")
	b, err := e.dial(registration("wide-a", "wide-a", "wide"), secretA)
	if err != nil {
		t.Fatal(err)
	}
	if rc, _ := alpha.Scope("app").Channel("orders.new").Send(ctxT(t, wait), "wide-a", nil); rc.Result != wire.Rejected {
		t.Fatalf("event on a dotted channel: %+v", rc)
	}
	_, err = alpha.Scope("app").Channel("orders.ask").Request(ctxT(t, wait), "wide-a", nil)
	var re *client.RequestError
	if !errors.As(err, &re) || !strings.Contains(re.Text, "REJECTED") || !strings.Contains(re.Text, "namespace:path") {
		t.Fatalf("request on a dotted channel: %v", err)
	}
	// Nothing reached the backend: its next frame is the PONG.
	b.write(EncodeEmpty(TypeHeartbeat))
	if v := b.next(); v != TypePong {
		t.Fatalf("got %#v", v)
	}
}
