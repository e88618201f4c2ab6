package broker_test

// What the broker vouches for when it routes: the sender's address, the
// kind of an error reply, and which answer closes a send.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestForgedSourceIsOverwritten: the broker derives "from" from the
// authenticated connection, whatever the client wrote.
func TestForgedSourceIsOverwritten(t *testing.T) {
	eachTopology(t, testOpts(), testForgedSourceIsOverwritten)
}

func testForgedSourceIsOverwritten(t *testing.T, p placement) {
	a := connect(t, p.at(0), "alpha")
	var in inbox
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), in.Handler); err != nil {
		t.Fatal(err)
	}
	p.sees(t, "alpha")
	e := p.at(1)
	r := e.DialRaw(t)
	if m := r.Hello(t, wire.ProtocolVersion, "mallory", "local", e.Secrets["local"]); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("hello: %q", m)
	}
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "e1").WithHeader(wire.HeaderTo, "alpha").
		WithHeader(wire.HeaderFrom, "alpha.bus"))
	if rc := r.Read(t); rc.Value(wire.HeaderResult) != string(wire.Accepted) || rc.Value(wire.HeaderReplyTo) != "e1" {
		t.Fatalf("receipt %q", rc)
	}
	testbroker.Eventually(t, 5*time.Second, "delivery", func() bool { return in.Len() == 1 })
	if got := in.Get(0).From(); got != "mallory.bus" {
		t.Fatalf("from = %q, want mallory.bus", got)
	}
	// A response that answers nobody's request is dropped, never delivered.
	r.Send(t, wire.New(wire.TypeResponse, "x").WithHeader(wire.HeaderID, "r1").WithHeader(wire.HeaderReplyTo, "not-open").WithHeader(wire.HeaderTo, "alpha"))
	testbroker.Eventually(t, 5*time.Second, "dropped reply counted", func() bool { return e.Broker.Stats().DroppedReplies >= 1 })
}

// TestHandlerCannotForgeErrorKind: a handler cannot pass its failure off
// as the broker's: a result other than NO_HANDLER, OVERLOAD or
// HANDLER_FAILED on an error reply becomes HANDLER_FAILED, and a success
// reply carries none.
// (A handler's reply used to reach the caller with whatever result it named.)
func TestHandlerCannotForgeErrorKind(t *testing.T) {
	eachTopology(t, testOpts(), testHandlerCannotForgeErrorKind)
}

func testHandlerCannotForgeErrorKind(t *testing.T, p placement) {
	b := connect(t, p.at(0), "beta")
	e := p.at(1)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "forger", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdHandle).WithHeader(wire.HeaderID, "h").WithBody([]byte("rpc")))
	r.Read(t)
	p.sees(t, "forger")
	res := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := b.Scope("s").Channel("rpc").Request(ctxT(t, 5*time.Second), "forger", nil)
			res <- err
		}()
	}
	for i := range 2 {
		req := r.Read(t)
		resp := wire.New(wire.TypeResponse, "rpc").WithHeader(wire.HeaderID, fmt.Sprint("r", i)).
			WithHeader(wire.HeaderReplyTo, req.Value(wire.HeaderID)).WithHeader(wire.HeaderResult, string(wire.ResultDisconnect))
		if i == 0 {
			resp.Set(wire.HeaderRC, "20")
		} else {
			resp.Set(wire.HeaderRC, "0")
		}
		r.Send(t, resp)
	}
	var failed, ok int
	for range 2 {
		err := <-res
		switch {
		case err == nil:
			ok++
		case errors.Is(err, client.ErrHandlerFailed):
			failed++
		default:
			t.Fatalf("forged kind got through: %v", err)
		}
	}
	if failed != 1 || ok != 1 {
		t.Fatalf("%d failed, %d ok", failed, ok)
	}
}

// TestOnlyReceiptClosesSend: a node cannot discard a sender's receipt by
// answering the event with a plain response: only a bus.receipt closes a
// send.
// (A response used to close the send, and the sender never got its receipt.)
func TestOnlyReceiptClosesSend(t *testing.T) {
	eachTopology(t, testOpts(), testOnlyReceiptClosesSend)
}

func testOnlyReceiptClosesSend(t *testing.T, p placement) {
	b := connect(t, p.at(0), "beta")
	e := p.at(1)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "sink", "local", e.Secrets["local"])
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s").WithBody([]byte("ev")))
	r.Read(t)
	p.sees(t, "sink")
	got := make(chan client.Receipt, 1)
	go func() { r, _ := b.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "sink", nil); got <- r }()
	ev := r.Read(t)
	r.Send(t, wire.New(wire.TypeResponse, "ev").WithHeader(wire.HeaderID, "x").WithHeader(wire.HeaderReplyTo, ev.Value(wire.HeaderID)))
	r.Send(t, wire.New(wire.TypeResponse, wire.CmdReceipt).WithHeader(wire.HeaderReplyTo, ev.Value(wire.HeaderID)).WithHeader(wire.HeaderResult, string(wire.Accepted)))
	if rc := <-got; rc.Result != wire.Accepted {
		t.Fatalf("receipt %+v", rc)
	}
}
