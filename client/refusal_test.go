package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// Every Channel method reports a refusal made before anything is sent as
// a plain error matching its sentinel, never as a receipt or a
// *RequestError.
func TestChannelRefusalsArePlainErrors(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: 1024})
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("x").Subscribe(ctxT(t, 5*time.Second), func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	closedScope := b.Scope("closed")
	closedScope.Close()
	ended := connect(t, e, "ended")
	ended.Close()

	type call struct {
		name string
		do   func(ch *client.Channel) (client.Receipt, error)
	}
	send := func(target string, payload []byte) func(ch *client.Channel) (client.Receipt, error) {
		return func(ch *client.Channel) (client.Receipt, error) {
			return ch.Send(ctxT(t, 5*time.Second), target, payload)
		}
	}
	request := func(target string, payload []byte) func(ch *client.Channel) (client.Receipt, error) {
		return func(ch *client.Channel) (client.Receipt, error) {
			m, err := ch.Request(ctxT(t, 5*time.Second), target, payload)
			if m != nil {
				t.Errorf("a refused request returned a reply")
			}
			return client.Receipt{}, err
		}
	}
	publish := func(payload []byte) func(ch *client.Channel) (client.Receipt, error) {
		return func(ch *client.Channel) (client.Receipt, error) {
			res, err := ch.Publish(ctxT(t, 5*time.Second), payload)
			return client.Receipt{ID: res.ID}, err
		}
	}
	emit := func(payload []byte) func(ch *client.Channel) (client.Receipt, error) {
		return func(ch *client.Channel) (client.Receipt, error) {
			return client.Receipt{}, ch.Emit(ctxT(t, 5*time.Second), payload)
		}
	}
	big := make([]byte, 1025)
	for _, c := range []struct {
		what string
		ch   *client.Channel
		want error
		call []call
	}{
		{"reserved channel", b.Scope("s").Channel("bus.x"), auth.ErrBadChannel,
			[]call{{"send", send("alpha", nil)}, {"request", request("alpha", nil)}, {"publish", publish(nil)}, {"emit", emit(nil)}}},
		{"payload over the limit", b.Scope("s").Channel("x"), client.ErrPayloadTooLarge,
			[]call{{"send", send("alpha", big)}, {"request", request("alpha", big)}, {"publish", publish(big)}, {"emit", emit(big)}}},
		{"no target", b.Scope("s").Channel("x"), wire.ErrBadAddress,
			[]call{{"send", send("", nil)}, {"request", request("", nil)}}},
		{"malformed target", b.Scope("s").Channel("x"), wire.ErrBadAddress,
			[]call{{"send", send("Alpha", nil)}, {"request", request("Alpha", nil)}}},
		{"cross-mesh target", b.Scope("s").Channel("x"), wire.ErrCrossMesh,
			[]call{{"send", send("alpha.bus@mesh.example.com", nil)}, {"request", request("alpha.bus@mesh.example.com", nil)}}},
		{"closed scope", closedScope.Channel("x"), client.ErrScopeClosed,
			[]call{{"send", send("alpha", nil)}, {"request", request("alpha", nil)}, {"publish", publish(nil)}, {"emit", emit(nil)}}},
		{"closed client", ended.Scope("s").Channel("x"), client.ErrClosed,
			[]call{{"send", send("alpha", nil)}, {"request", request("alpha", nil)}, {"publish", publish(nil)}, {"emit", emit(nil)}}},
	} {
		for _, k := range c.call {
			r, err := k.do(c.ch)
			var re *client.RequestError
			if !errors.Is(err, c.want) || errors.As(err, &re) || r != (client.Receipt{}) {
				t.Errorf("%s: %s = %+v, %v; want a plain error matching %v and nothing else", c.what, k.name, r, err, c.want)
			}
		}
	}
	// At the limit the call is sent, and answered by the broker as usual.
	if r, err := b.Scope("s").Channel("x").Send(ctxT(t, 5*time.Second), "alpha", make([]byte, 1024)); err != nil || r.Result != wire.Accepted {
		t.Fatalf("at the limit: %+v, %v", r, err)
	}
}

// Each subscriber of an event gets a Message of its own: one that modifies
// its payload changes nothing another sees.
func TestPayloadIsEachReceiversOwn(t *testing.T) {
	e := testbroker.Start(t, "unix", testOpts())
	a := connect(t, e, "alpha", func(o *client.Options) { o.Workers = 1 }) // subscribers run one after the other
	b := connect(t, e, "beta")
	got := make(chan string, 6)
	scribble := func(_ context.Context, m *client.Message) {
		got <- string(m.Payload())
		p := m.Payload()
		for i := range p {
			p[i] = 'X'
		}
	}
	for _, name := range []string{"ev", "st"} {
		for range 3 {
			if _, err := a.Scope("s").Channel(name).Subscribe(ctxT(t, 5*time.Second), scribble); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r, err := b.Scope("s").Channel("ev").Send(ctxT(t, 5*time.Second), "alpha", []byte("event")); err != nil || r.Result != wire.Accepted {
		t.Fatalf("send: %+v, %v", r, err)
	}
	for range 3 {
		if p := <-got; p != "event" {
			t.Fatalf("a subscriber saw %q: another's change", p)
		}
	}
	if err := b.Scope("s").Channel("st").Emit(ctxT(t, 5*time.Second), []byte("stream")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case p := <-got:
			if p != "stream" {
				t.Fatalf("a stream subscriber saw %q: another's change", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("stream message not delivered")
		}
	}
}
