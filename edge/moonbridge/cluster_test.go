package moonbridge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbus"
	"busbar/internal/testclient"
)

// On a bus of brokers joined through NATS, a backend on one broker
// reaches nodes on the others, and they reach it: it is an ordinary node.
func TestAcrossBrokers(t *testing.T) {
	u := testbus.Start(t, broker.Options{})
	b1 := u.Brokers[0]
	keys, err := auth.NewStore([]auth.Principal{islands("primary", secretA)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Keys: keys, ProxyNode: b1.Broker.Name(), Dial: b1.Broker.DialInProcessAs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	e := &env{t: t, srv: srv, addr: l.Addr().String(), log: &logBuf{}}

	alpha := testclient.Connect(t, u.Brokers[1], "alpha")
	var in testclient.Inbox
	must(t)(alpha.Scope("app").Channel("mb:news").Subscribe(ctxT(t, wait), in.Handler))
	must(t)(alpha.Scope("app").Channel("mb:ask").Handle(ctxT(t, wait), func(_ context.Context, m *client.Message) ([]byte, error) {
		return append([]byte("re:"), m.Payload()...), nil
	}))
	b := e.register("island-a")
	testbus.AwaitKnown(t, u.Brokers, "alpha:mb:news", "island-a")

	target := BackendEndpoint("alpha")
	if p, _ := b.call(KindEvent, "mb:news", &target, "hi"); p.Type != ResponseSend || p.Result != Accepted {
		t.Fatalf("send across brokers: %+v", p)
	}
	if p, req := b.call(KindRequest, "mb:ask", &target, "q"); p.Type != ResponseReply || !validReply(&req, p.Reply) || string(p.Reply.Payload) != "re:q" {
		t.Fatalf("request across brokers: %+v", p)
	}
	errs := make(chan error, 1)
	go func() {
		m, err := alpha.Scope("app").Channel("mb:ask").Request(ctxT(t, wait), "island-a", []byte("back"))
		if err == nil && string(m.Payload()) != "ok" {
			err = errors.New("reply " + string(m.Payload()))
		}
		errs <- err
	}()
	f := b.nextMessage()
	if f.Message.Source != target {
		t.Fatalf("source %s", f.Message.Source)
	}
	r := Message{ID: NewUUID(), Kind: KindReply, Channel: f.Message.Channel, Source: *f.Message.Target, Target: &f.Message.Source, ReplyTo: &f.Message.ID, Payload: []byte("ok")}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseReply, Reply: &r})
	if err := <-errs; err != nil {
		t.Fatal(err)
	}

	// From the other broker too: a channel the backend handles by
	// pattern only (mb:*) reaches it, and its TIMED_OUT arrives as
	// TIMEOUT, from its node.
	go func() {
		_, err := alpha.Scope("app").Channel("mb:wild").Request(ctxT(t, wait), "island-a", nil)
		errs <- err
	}()
	f = b.nextMessage()
	if f.Message.Channel != "mb:wild" {
		t.Fatalf("request on a channel handled by pattern: %+v", f.Message)
	}
	b.respond(Response{OperationID: f.OperationID, Type: ResponseError, Err: Error{Code: CodeTimedOut, Detail: "slow"}})
	var re *client.RequestError
	if err := <-errs; !errors.Is(err, client.ErrTimeout) || !errors.As(err, &re) || re.From != "island-a.bus" {
		t.Fatalf("the backend's TIMED_OUT across brokers: %v", err)
	}
}
