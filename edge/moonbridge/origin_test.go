package moonbridge

// Faithful to the origin: what a backend meets here is what MoonBridge's
// own proxy (proxy-core's control package) answers it, checked on the
// bytes its client reads.

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
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// rawResponse reads the next frame, which must be a RESPONSE to op, and
// returns its bytes after the type byte and the operation id.
func (b *backend) rawResponse(op int64) []byte {
	b.t.Helper()
	f, err := ReadFrame(b.r)
	if err != nil {
		b.t.Fatalf("%s reading: %v", b.name, err)
	}
	var head [9]byte
	head[0] = TypeResponse
	binary.BigEndian.PutUint64(head[1:], uint64(op))
	if !bytes.HasPrefix(f, head[:]) {
		b.t.Fatalf("%s: got % x, want a RESPONSE to op %d", b.name, f, op)
	}
	return f[9:]
}

// u16str is a string as the protocol writes it.
func u16str(s string) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...) }

// A request to a backend that is not connected is NOT_CONNECTED
// (MoonBridge's InboundRouter: "target backend is not connected"), and
// stays apart from a connected node without a handler (NO_HANDLER).
func TestOriginRequestNotConnected(t *testing.T) {
	e := start(t, nil)
	e.node("alpha") // connected, no handler
	b := e.register("island-a")

	gone := BackendEndpoint("island-gone")
	op, _ := b.message(KindRequest, "mb:ask", &gone, MaxTimeoutMillis, "hi")
	// 04 error, 01 NOT_CONNECTED, then the detail.
	want := append([]byte{byte(ResponseError), byte(CodeNotConnected)}, u16str("island-gone is not connected")...)
	if got := b.rawResponse(op); !bytes.Equal(got, want) {
		t.Fatalf("request to a backend not connected: % x, want % x", got, want)
	}

	alpha := BackendEndpoint("alpha")
	op, _ = b.message(KindRequest, "mb:ask", &alpha, MaxTimeoutMillis, "hi")
	if got := b.rawResponse(op); len(got) < 2 || got[0] != byte(ResponseError) || got[1] != byte(CodeNoHandler) {
		t.Fatalf("request to a node without a handler: % x, want 04 02 …", got)
	}

	// A send to it: the send result NOT_CONNECTED (04 is not this: 01
	// send, 03 NOT_CONNECTED).
	op, _ = b.message(KindEvent, "mb:news", &gone, MaxTimeoutMillis, "hi")
	if got := b.rawResponse(op); !bytes.Equal(got, []byte{byte(ResponseSend), byte(NotConnected)}) {
		t.Fatalf("send to a backend not connected: % x", got)
	}
}

// A publication's results list the proxy first, then the backends, as
// MoonBridge's router writes them.
func TestOriginPublishProxyFirst(t *testing.T) {
	e := start(t, nil)
	e.alpha("alpha")
	e.alpha("zeta")
	b := e.register("island-a")
	op, pub := b.message(KindEvent, "mb:news", nil, MaxTimeoutMillis, "all")
	self := b.nextMessage()
	b.respond(Response{OperationID: self.OperationID, Type: ResponseSend, Result: NoSubscriber})
	got := b.rawResponse(op)
	// 03 publish, the message id, a u16 count, then the first result:
	// 01 (the proxy) and its result.
	head := append([]byte{byte(ResponsePublish)}, pub.ID[:]...)
	head = append(head, 0, 4, 1, byte(NoSubscriber))
	if !bytes.HasPrefix(got, head) {
		t.Fatalf("publish results: % x\nwant them to start % x", got, head)
	}
}

// The rate MoonBridge's proxy allows one backend connection:
// MaxMessagesPerWindow MESSAGE frames per window, each answered; the
// next ends the connection (the window is long here, so that all fall
// in one).
func TestOriginMessageRate(t *testing.T) {
	e := start(t, func(c *Config) { c.MessageWindow = time.Hour })
	b := e.register("island-a")
	proxy := ProxyEndpoint()
	const heartbeats = 20 // not counted
	for i := range MaxMessagesPerWindow {
		b.message(KindEvent, "mb:news", &proxy, MaxTimeoutMillis, "x")
		if i%(MaxMessagesPerWindow/heartbeats) == 0 {
			b.write(EncodeEmpty(TypeHeartbeat))
		}
	}
	answered := map[int64]bool{}
	for pongs := 0; len(answered) < MaxMessagesPerWindow || pongs < heartbeats; {
		switch v := b.next().(type) {
		case Response:
			answered[v.OperationID] = true
		case byte:
			pongs++
		default:
			t.Fatalf("got %#v", v)
		}
	}
	b.message(KindEvent, "mb:news", &proxy, MaxTimeoutMillis, "one too many")
	b.closedWithoutFrame()
	testbroker.Eventually(t, wait, "the refusal logged", func() bool {
		return strings.Contains(e.log.String(), "moonbridge: message rate exceeded")
	})
}

// The window starts again a whole window after it started.
func TestMessageRateWindow(t *testing.T) {
	var r messageRate
	t0 := time.Unix(1000, 0)
	for i := range MaxMessagesPerWindow {
		if !r.allow(t0.Add(time.Duration(i)*time.Millisecond), time.Second) {
			t.Fatalf("message %d refused", i+1)
		}
	}
	if r.allow(t0.Add(time.Second-time.Nanosecond), time.Second) {
		t.Fatalf("message %d within the window allowed", MaxMessagesPerWindow+1)
	}
	if !r.allow(t0.Add(time.Second), time.Second) {
		t.Fatal("the first message of the next window refused")
	}
}

// A connection lost without GOODBYE keeps its backend name for its lease
// (MoonBridge's LeaseRegistry): another instance is refused meanwhile,
// the same instance takes it back; after GOODBYE the name is free at
// once.
func TestOriginLeaseHoldsName(t *testing.T) {
	e := start(t, nil)
	c := e.node("watcher")
	first := e.register("island-a")
	first.nc.Close() // lost, no GOODBYE
	e.inDirectory(c, "island-a", false)
	e.released("island-a")

	// Busbar's request to it, and the backend's, meet NOT_CONNECTED.
	other := e.register("island-b")
	gone := BackendEndpoint("island-a")
	if p, _ := other.call(KindRequest, "mb:ask", &gone, "hi"); p.Type != ResponseError || p.Err.Code != CodeNotConnected {
		t.Fatalf("request to a held name: %+v", p)
	}

	if _, err := e.dial(registration("island-a", "other-instance", "primary"), secretA); err == nil {
		t.Fatal("another instance took a name within its lease")
	}
	testbroker.Eventually(t, wait, "the refusal logged", func() bool {
		return strings.Contains(e.log.String(), "until its lease ends")
	})
	again := e.register("island-a") // the same instance
	again.write(EncodeEmpty(TypeGoodbye))
	again.closedWithoutFrame()
	// Free once the session is wound down (the node leaves busbar's
	// directory a moment before): never held for the lease.
	testbroker.Await(t, wait, "another instance registered after GOODBYE", func() error {
		_, err := e.dial(registration("island-a", "other-instance", "primary"), secretA)
		return err
	})
}

// released waits until the server has wound down name's session (its
// node leaves busbar's directory a moment before).
func (e *env) released(name string) {
	e.t.Helper()
	testbroker.Eventually(e.t, wait, name+"'s session wound down", func() bool {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		return e.srv.sessions[name] == nil
	})
}

// The hold ends with the lease: its last renewal (registration, then
// each HEARTBEAT) and Lease.
func TestOriginLeaseHoldEnds(t *testing.T) {
	const lease = 2 * time.Second
	e := start(t, func(c *Config) { c.Lease = lease })
	c := e.node("watcher")
	first := e.register("island-a")
	lost := time.Now()
	first.nc.Close()
	e.inDirectory(c, "island-a", false)
	_, err := e.dial(registration("island-a", "other-instance", "primary"), secretA)
	if err == nil && time.Since(lost) < lease {
		t.Fatal("another instance took a name within its lease")
	}
	testbroker.Await(t, wait, "the name free once the lease ended", func() error {
		if _, err := e.dial(registration("island-a", "other-instance", "primary"), secretA); err != nil {
			return fmt.Errorf("refused: %w", err)
		}
		return nil
	})
	if time.Since(lost) < lease {
		t.Fatalf("the name was free %v after the connection was lost, within its lease of %v", time.Since(lost), lease)
	}
}

// A principal granted handle mb:* makes its backend the handler of every
// mb: channel: busbar's request on any of them reaches the backend, as
// MoonBridge's proxy forwards a request on any channel the backend may
// receive; one outside the grant does not. A busbar client cannot
// handle a pattern (only an edge's node can).
func TestOriginWildcardHandle(t *testing.T) {
	wild := islands("wild", secretA+"-wild")
	wild.Name, wild.Nodes = "wild", []auth.Pattern{"wild-*"}
	wild.Permissions.Handle = []auth.Pattern{"mb:*"}
	e := start(t, nil, wild)
	b, err := e.dial(registration("wild-a", "wild-a", "wild"), secretA+"-wild")
	if err != nil {
		t.Fatal(err)
	}
	c := e.node("alpha")
	for _, ch := range []string{"mb:ask", "mb:anything-at-all"} {
		got := make(chan error, 1)
		go func() {
			m, err := c.Scope("app").Channel(ch).Request(ctxT(t, wait), "wild-a", []byte("q"))
			if err == nil && string(m.Payload()) != "a:"+ch {
				err = fmt.Errorf("reply %q", m.Payload())
			}
			got <- err
		}()
		f, err := ReadFrame(b.r)
		if err != nil {
			t.Fatal(err)
		}
		// MESSAGE, op, timeout, id, 02 REQUEST, the channel.
		if len(f) < 34+2+len(ch) || f[0] != TypeMessage || f[33] != byte(KindRequest) || !bytes.Equal(f[34:36+len(ch)], u16str(ch)) {
			t.Fatalf("request on %s: % x", ch, f)
		}
		mf, err := DecodeMessage(f)
		if err != nil {
			t.Fatal(err)
		}
		q := mf.Message
		reply := Message{ID: NewUUID(), Kind: KindReply, Channel: ch, Source: *q.Target, Target: &q.Source, ReplyTo: &q.ID, Payload: []byte("a:" + ch)}
		b.respond(Response{OperationID: mf.OperationID, Type: ResponseReply, Reply: &reply})
		if err := <-got; err != nil {
			t.Fatalf("request on %s: %v", ch, err)
		}
	}
	if _, err := c.Scope("app").Channel("other:ask").Request(ctxT(t, wait), "wild-a", nil); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("request outside the handle grant: %v, want REJECTED", err)
	}
	if _, err := c.Scope("app").Channel("mb:*").Handle(ctxT(t, wait), func(context.Context, *client.Message) ([]byte, error) { return nil, nil }); err == nil {
		t.Fatal("a busbar client registered a handler on a pattern")
	}
}

// A reply that does not match its request is PROTOCOL_ERROR, and the
// connection stays; a response of the wrong type is PROTOCOL_ERROR, and
// the connection is closed (MoonBridge's BackendExchange).
func TestOriginProtocolError(t *testing.T) {
	e := start(t, nil)
	c := e.node("alpha")
	b := e.register("island-a")
	request := func() (chan error, MessageFrame) {
		got := make(chan error, 1)
		go func() {
			_, err := c.Scope("app").Channel("mb:ask").Request(ctxT(t, wait), "island-a", []byte("q"))
			got <- err
		}()
		return got, b.nextMessage()
	}
	got, f := request()
	q := f.Message
	other := NewUUID()
	bad := Message{ID: NewUUID(), Kind: KindReply, Channel: q.Channel, Source: *q.Target, Target: &q.Source, ReplyTo: &other}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &bad})
	var re *client.RequestError
	if err := <-got; !errors.As(err, &re) || !errors.Is(err, client.ErrProtocol) || re.From != "island-a.bus" ||
		!strings.HasPrefix(re.Text, "PROTOCOL_ERROR: the backend returned a reply for a different request or identity") {
		t.Fatalf("mismatched reply: %v", err)
	}
	got, f = request() // the connection stayed
	b.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: Accepted})
	if err := <-got; !errors.As(err, &re) || !errors.Is(err, client.ErrProtocol) ||
		!strings.HasPrefix(re.Text, "PROTOCOL_ERROR: the backend returned the wrong response type") {
		t.Fatalf("a send result to a request: %v", err)
	}
	b.closedWithoutFrame()
}

// Each send result and error code a backend answers busbar with arrives
// as what it is: a receipt's result, a request error's kind (with the
// backend's node as its from, and the code first in its text). The
// backend's answers are written byte for byte as MoonBridge's client
// writes them.
func TestOriginCodesToBus(t *testing.T) {
	e := start(t, nil)
	c := e.node("alpha")
	b := e.register("island-a")
	answer := func(op int64, body ...byte) {
		f := binary.BigEndian.AppendUint64([]byte{TypeResponse}, uint64(op))
		b.write(append(f, body...))
	}
	for _, r := range []struct {
		code byte
		want wire.Result
	}{
		{1, wire.Accepted}, {2, wire.NoSubscriber}, {3, wire.NotConnected}, {4, wire.Backpressured},
		{5, wire.Rejected}, {6, wire.TimedOut}, {7, wire.Failed},
	} {
		got := make(chan client.Receipt, 1)
		go func() { rc, _ := c.Scope("app").Channel("mb:news").Send(ctxT(t, wait), "island-a", nil); got <- rc }()
		answer(b.nextMessage().OperationID, byte(ResponseSend), r.code)
		if rc := <-got; rc.Result != r.want {
			t.Errorf("send result %d: receipt %s, want %s", r.code, rc.Result, r.want)
		}
	}
	for _, r := range []struct {
		code byte
		kind wire.Result
		is   error
	}{
		{1, wire.ResultNotConnected, client.ErrNotConnected}, {2, wire.ResultNoHandler, client.ErrNoHandler},
		{3, wire.ResultOverload, client.ErrOverload}, {4, wire.ResultTimeout, client.ErrTimeout},
		{5, wire.ResultNoHandler, client.ErrNoHandler}, {6, wire.ResultRejected, client.ErrRejected},
		{7, wire.ResultHandler, client.ErrHandlerFailed}, {8, wire.ResultProtocol, client.ErrProtocol},
	} {
		got := make(chan error, 1)
		go func() { _, err := c.Scope("app").Channel("mb:ask").Request(ctxT(t, wait), "island-a", nil); got <- err }()
		answer(b.nextMessage().OperationID, append([]byte{byte(ResponseError), r.code}, u16str("why")...)...)
		var re *client.RequestError
		err := <-got
		if !errors.As(err, &re) || re.Kind != r.kind || !errors.Is(err, r.is) || re.From != "island-a.bus" ||
			re.Text != ErrorCode(r.code).String()+": why" {
			t.Errorf("error code %d: %v (from %v), want %s", r.code, err, re, r.kind)
		}
	}
}

// Each kind busbar answers a backend's request with arrives as
// MoonBridge's code for it, byte for byte; those of another backend too.
func TestOriginCodesToBackend(t *testing.T) {
	e := start(t, nil)
	a := e.register("island-a")
	bk := e.register("island-b")
	target := BackendEndpoint("island-b")
	for _, code := range []ErrorCode{CodeTimedOut, CodeRejected, CodeNotConnected, CodeProtocolError, CodeHandlerFailed, CodeBackpressured, CodeNoHandler} {
		op, _ := a.message(KindRequest, "mb:ask", &target, MaxTimeoutMillis, "q")
		f := bk.nextMessage()
		bk.respond(Response{OperationID: f.OperationID, Type: ResponseError, Err: Error{Code: code, Detail: "why"}})
		got := a.rawResponse(op)
		if len(got) < 2 || got[0] != byte(ResponseError) || got[1] != byte(code) {
			t.Errorf("island-b answered %s: island-a got % x, want 04 %02x …", code, got, byte(code))
		}
	}
	for _, r := range []SendResult{Accepted, NoSubscriber, NotConnected, Backpressured, Rejected, TimedOut, Failed} {
		op, _ := a.message(KindEvent, "mb:news", &target, MaxTimeoutMillis, "e")
		f := bk.nextMessage()
		bk.respond(Response{OperationID: f.OperationID, Type: ResponseSend, Result: r})
		if got := a.rawResponse(op); !bytes.Equal(got, []byte{byte(ResponseSend), byte(r)}) {
			t.Errorf("island-b answered %s: island-a got % x, want 01 %02x", r, got, byte(r))
		}
	}
}
