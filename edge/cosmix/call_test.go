package cosmix

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"busbar/client"
	"busbar/edge/port"
	"busbar/wire"
)

// The flow of cosmix-lib-client's examples/test_noded.rs: two apps
// register, A sends B a fire-and-forget greet, calls B and gets its answer.
func TestTwoCosmixAppsSendAndCallEachOther(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1)
	b.register("service-b", 1)

	a.send("---\ncommand: greet\nfrom: service-a\nto: service-b\ntype: request\n---\n{\"msg\":\"hello from A\"}\n")
	b.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-a\nto: service-b\ntype: request\n---\n{\"msg\":\"hello from A\"}\n")

	a.send(callFrame)
	b.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-a\nid: noded-1\nto: service-b\ntype: request\n---\n{\"msg\":\"hello from A\"}\n")
	// NodedClient::respond: command, from, to, type, rc, id.
	b.send("---\ncommand: greet\nfrom: service-b\nid: noded-1\nrc: 0\nto: service-a\ntype: response\n---\n{\"hi\":\"A\"}\n")
	a.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-b\nid: 2\nrc: 0\nto: service-a\ntype: response\n---\n{\"hi\":\"A\"}\n")
}

// noded removes an anonymous caller's "from" (whatever it wrote) from the
// frame it routes, and the "to" from the correlated reply.
func TestAnAnonymousAppsCallReachesTheServiceWithoutFromAsNodedRoutesIt(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	b.register("service-b", 1)
	a.send("---\ncommand: greet\nfrom: anonymous\nid: 1\nto: service-b\ntype: request\n---\n")
	b.expect("---\nbroker_origin: local\ncommand: greet\nid: noded-1\nto: service-b\ntype: request\n---\n")
	// NodedClient::respond writes "to" from the request's "from": none.
	b.send("---\ncommand: greet\nfrom: service-b\nid: noded-1\nrc: 0\ntype: response\n---\n")
	a.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-b\nid: 1\nrc: 0\ntype: response\n---\n")
	// A fire-and-forget message too.
	a.send("---\ncommand: note\nfrom: service-b\nto: service-b\ntype: request\n---\n")
	b.expect("---\nbroker_origin: local\ncommand: note\nto: service-b\ntype: request\n---\n")
}

func TestAnAppErrorKeepsItsRCAndText(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1)
	b.register("service-b", 1)
	for i, rc := range []string{"10", "20", "12"} {
		id := itoa(i + 2)
		a.send("---\ncommand: fail\nfrom: service-a\nid: " + id + "\nto: service-b\ntype: request\n---\n")
		m := b.recvMsg()
		b.send(frame(map[string]string{"command": "fail", "error": "boom " + rc, "from": "service-b", "id": m.Value("id"), "rc": rc, "to": "service-a", "type": "response"}, ""))
		a.expect("---\nbroker_origin: local\ncommand: fail\nerror: boom " + rc + "\nfrom: service-b\nid: " + id + "\nrc: " + rc + "\nto: service-a\ntype: response\n---\n")
	}
}

func TestAStructuredErrorBodyComesBackAsTheBody(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	b.register("service-b", 1)
	a.send("---\ncommand: props.delete\nid: 1\nto: service-b\ntype: request\n---\n")
	m := b.recvMsg()
	b.send(frame(map[string]string{"id": m.Value("id"), "rc": "10", "type": "response"}, `{"error_code":"not_found","message":"no such key"}`))
	got := a.recvMsg()
	if got.Value("rc") != "10" || string(got.Body()) != `{"error_code":"not_found","message":"no such key"}` {
		t.Fatalf("got %v", got)
	}
}

func TestACallToNobodyIsRC10NotFound(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: greet\nid: 3\nto: nobody\ntype: request\n---\n")
	a.expect("---\nerror: Service 'nobody' not found\nid: 3\nrc: 10\ntype: response\n---\n")
	a.send("---\ncommand: greet\nid: 4\nto: nobody.nowhere.bus\ntype: request\n---\n")
	a.expect("---\nerror: Unknown mesh node: 'nowhere'\nid: 4\nrc: 10\ntype: response\n---\n")
	// Fire-and-forget to nobody: noded's reply, without id.
	a.send("---\ncommand: greet\nto: nobody\ntype: request\n---\n")
	a.expect("---\nerror: Service 'nobody' not found\nrc: 10\ntype: response\n---\n")
}

func TestMalformedAndCrossMeshTargetsAreRC10WithNodedsText(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: greet\nid: 1\nto: a.b.c.d.e.bus\ntype: request\n---\n")
	a.expect("---\nerror: Invalid Bus target: 'a.b.c.d.e.bus'\nid: 1\nrc: 10\ntype: response\n---\n")
	a.send("---\ncommand: greet\nid: 2\nto: maild.alpha.bus@mesh.example.com\ntype: request\n---\n")
	a.expect("---\nerror: cross-mesh routing not implemented: 'maild.alpha.bus@mesh.example.com'\nid: 2\nrc: 10\ntype: response\n---\n")
	// cosmix-lib-bus parses no bare service left of "@", nor a mesh name
	// without a dot: noded finds no target there.
	for _, to := range []string{"maild@mesh.example.com", "maild.alpha.bus@mesh", "maild.alpha.bus@xn--p1ai.example", "a@b@c.d"} {
		a.send("---\ncommand: greet\nid: 3\nto: " + to + "\ntype: request\n---\n")
		a.expect("---\nerror: Invalid Bus target: '" + to + "'\nid: 3\nrc: 10\ntype: response\n---\n")
	}
}

func TestACallTimesOutWithRC20(t *testing.T) {
	e := start(t, func(c *Config) { c.CallTimeout = 200 * time.Millisecond })
	a, b := e.dial(), e.dial()
	b.register("service-b", 1)
	a.send("---\ncommand: slow\nid: 1\nto: service-b\ntype: request\n---\n")
	b.recvMsg() // and never answers
	// The caller's deadline or the callee's (the same one) ends it first.
	if m := a.recvMsg(); m.Value("rc") != "20" || m.Value("error") != "Service 'service-b' timed out" || m.Value("id") != "1" {
		t.Fatalf("got %v", m)
	}
}

func TestACalleeThatDisconnectsIsRC10Disconnected(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	b.register("service-b", 1)
	a.send("---\ncommand: slow\nid: 1\nto: service-b\ntype: request\n---\n")
	b.recvMsg()
	_ = b.ws.CloseNow()
	a.expect("---\nerror: Service 'service-b' disconnected\nid: 1\nrc: 10\ntype: response\n---\n")
}

func TestABusbarNodeCallsACosmixServiceWithRCBandsKept(t *testing.T) {
	e := start(t, nil)
	b := e.dial()
	b.register("service-b", 1)
	alpha := e.node("alpha")
	ch := alpha.Scope("test").Channel(CallChannel)

	type result struct {
		m   *client.Message
		err error
	}
	ask := func(payload string) <-chan result {
		out := make(chan result, 1)
		go func() {
			m, err := ch.Request(ctxT(t), "service-b", []byte(payload))
			out <- result{m, err}
		}()
		return out
	}
	got := ask(`{"command":"greet","args":{"x":1},"headers":{"target":"w1"}}`)
	b.expect("---\nbroker_origin: local\ncommand: greet\nfrom: alpha.bus\nid: noded-1\ntarget: w1\nto: service-b\ntype: request\n---\n{\"x\":1}\n")
	b.send("---\ncommand: greet\nfrom: service-b\nid: noded-1\nrc: 0\nto: alpha.bus\ntype: response\n---\n{\"ok\":true}\n")
	if r := <-got; r.err != nil || string(r.m.Payload()) != `{"ok":true}` {
		t.Fatalf("reply %v %v", r.m, r.err)
	}

	got = ask(`{"command":"greet"}`)
	m := b.recvMsg()
	b.send(frame(map[string]string{"error": "no such greeting", "id": m.Value("id"), "rc": "12", "type": "response"}, ""))
	r := <-got
	var re *client.RequestError
	if !errors.As(r.err, &re) || re.Kind != wire.ResultHandler || re.RC != 12 || re.Text != "no such greeting" {
		t.Fatalf("want HANDLER_FAILED rc 12, got %v", r.err)
	}

	// A node that pretends to be service-a is named by its address.
	got = ask(`{"command":"greet","from":"service-a"}`)
	if m := b.recvMsg(); m.Value("from") != "alpha.bus" {
		t.Fatalf("a claimed name was believed: %v", m)
	} else {
		b.send(frame(map[string]string{"id": m.Value("id"), "rc": "0", "type": "response"}, ""))
	}
	<-got
}

func TestACosmixAppCallsABusbarServiceOnItsChannel(t *testing.T) {
	e := start(t, nil)
	alpha := e.node("alpha")
	ch := alpha.Scope("geo").Channel("geo.lookup")
	if _, err := ch.Handle(ctxT(t), func(_ context.Context, m *client.Message) ([]byte, error) {
		if string(m.Payload()) == `{"q":"bad"}` {
			return nil, &client.HandlerError{RC: 11, Text: "bad query"}
		}
		return []byte(`{"lat":1}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	ann := announcement("geo")
	ann.Channels = []string{"geo.lookup"}
	if _, err := alpha.Announce(ctxT(t), ann); err != nil {
		t.Fatal(err)
	}
	a := e.dial()
	a.register("service-a", 1)
	a.send("---\ncommand: geo.lookup\nfrom: service-a\nid: 2\nto: geo\ntype: request\n---\n{\"q\":\"x\"}\n")
	a.expect("---\nbroker_origin: local\ncommand: geo.lookup\nfrom: geo\nid: 2\nrc: 0\nto: service-a\ntype: response\n---\n{\"lat\":1}\n")
	a.send("---\ncommand: geo.lookup\nfrom: service-a\nid: 3\nto: geo.alpha.bus\ntype: request\n---\n{\"q\":\"bad\"}\n")
	a.expect("---\nbroker_origin: local\ncommand: geo.lookup\nerror: bad query\nfrom: geo\nid: 3\nrc: 11\nto: service-a\ntype: response\n---\n")
	// A command the service does not handle: busbar's NO_HANDLER.
	a.send("---\ncommand: geo.other\nfrom: service-a\nid: 4\nto: geo\ntype: request\n---\n")
	a.expect("---\nerror: Service 'geo' not found\nid: 4\nrc: 10\ntype: response\n---\n")
}

func TestACosmixAppCallsABusbarPort(t *testing.T) {
	e := start(t, nil)
	srv, err := port.New(port.Config{Name: "notes", Commands: map[string]port.Command{
		"greet": {Run: func(_ context.Context, args json.RawMessage) (any, error) {
			var a struct{ Name string }
			_ = json.Unmarshal(args, &a)
			return map[string]string{"greeting": "hello " + a.Name}, nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.ServeBus(ctxT(t), e.node("alpha"), "notes"); err != nil {
		t.Fatal(err)
	}
	a := e.dial()
	a.send("---\ncommand: greet\nid: 1\nto: notes\ntype: request\n---\n{\"name\":\"ann\"}\n")
	a.expect("---\nbroker_origin: local\ncommand: greet\nfrom: notes\nid: 1\nrc: 0\ntype: response\n---\n{\"greeting\":\"hello ann\"}\n")
}

func TestACallByAddressReachesTheCosmixServiceWithItsSubLabel(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	b.register("service-b", 1)
	infos, err := e.node("alpha").Whois(ctxT(t), "service-b")
	if err != nil || len(infos) != 1 {
		t.Fatalf("whois: %v %v", infos, err)
	}
	for i, to := range []string{infos[0].Address, "win1." + infos[0].Address} {
		id := itoa(i + 1)
		a.send("---\ncommand: show\nid: " + id + "\nto: " + to + "\ntype: request\n---\n")
		m := b.recvMsg()
		if m.Value("to") != to || m.Value("command") != "show" {
			t.Fatalf("to %s: b got %v", to, m)
		}
		b.send(frame(map[string]string{"id": m.Value("id"), "rc": "0", "type": "response"}, ""))
		if r := a.recvMsg(); r.Value("id") != id || r.Value("rc") != "0" || r.Value("from") != "service-b" {
			t.Fatalf("to %s: a got %v", to, r)
		}
	}
}

func TestANonJSONBodyTravelsBetweenCosmixAppsAsItIs(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	b.register("service-b", 1)
	a.send("---\ncommand: spec.get\nid: 1\nto: service-b\ntype: request\n---\n# Title\nsome *markdown*\n")
	m := b.recvMsg()
	if string(m.Body()) != "# Title\nsome *markdown*" {
		t.Fatalf("b got body %q", m.Body())
	}
	b.send(frame(map[string]string{"id": m.Value("id"), "rc": "0", "type": "response"}, "# Reply"))
	if r := a.recvMsg(); string(r.Body()) != "# Reply" {
		t.Fatalf("a got %v", r)
	}
}

func TestACallIntoAConnectionThatHasNoServiceOrABadPayloadFails(t *testing.T) {
	e := start(t, nil)
	e.dial() // anonymous
	b := e.dial()
	b.register("service-b", 1)
	alpha := e.node("alpha")
	svc, err := alpha.Whois(ctxT(t), "service-b")
	if err != nil || len(svc) != 1 {
		t.Fatalf("whois: %v %v", svc, err)
	}
	nodes, err := alpha.Directory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var anonNode string // the other cosmix connection's node
	for _, n := range nodes {
		if strings.HasPrefix(n.Node, "cosmix-") && n.Node != svc[0].Provenance.Node {
			anonNode = n.Node
		}
	}
	ch := alpha.Scope("t").Channel(CallChannel)
	_, err = ch.Request(ctxT(t), anonNode+".bus", []byte(`{"command":"x"}`))
	var re *client.RequestError
	if !errors.As(err, &re) || re.RC != wire.RCError || re.Text != "no cosmix service is registered on this connection" {
		t.Fatalf("a call into an anonymous connection: %v", err)
	}
	_, err = ch.Request(ctxT(t), "service-b", []byte(`not json`))
	if !errors.As(err, &re) || re.RC != wire.RCFailure || !strings.HasPrefix(re.Text, "want a JSON payload") {
		t.Fatalf("a payload that is not a CallRequest: %v", err)
	}
}

func TestAWarningAndTheResponsesHeadersTravelBetweenCosmixApps(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1)
	b.register("service-b", 1)
	a.send("---\ncommand: seed\nfrom: service-a\nid: 2\nto: service-b\ntype: request\n---\n")
	m := b.recvMsg()
	b.send(frame(map[string]string{"command": "seed", "error": "2 of 3 seeded", "from": "service-b", "id": m.Value("id"),
		"rc": "5", "to": "service-a", "type": "response", "x-count": "2"}, `{"results":[1,2]}`))
	a.expect("---\nbroker_origin: local\ncommand: seed\nerror: 2 of 3 seeded\nfrom: service-b\nid: 2\nrc: 5\nto: service-a\ntype: response\nx-count: 2\n---\n{\"results\":[1,2]}\n")
}

// Two anonymous callers both number their calls from 1 (NodedClient's
// next_id): each gets its own reply.
func TestTwoCallersWithTheSameIDsGetTheirOwnReplies(t *testing.T) {
	e := start(t, nil)
	x, y, b := e.dial(), e.dial(), e.dial()
	b.register("service-b", 1)
	x.send("---\ncommand: who\nid: 1\nto: service-b\ntype: request\n---\n\"x\"\n")
	y.send("---\ncommand: who\nid: 1\nto: service-b\ntype: request\n---\n\"y\"\n")
	for range 2 {
		m := b.recvMsg()
		b.send(frame(map[string]string{"id": m.Value("id"), "rc": "0", "type": "response"}, "for "+string(m.Body())))
	}
	if got := x.recvMsg(); got.Value("id") != "1" || string(got.Body()) != `for "x"` {
		t.Fatalf("x got %v", got)
	}
	if got := y.recvMsg(); got.Value("id") != "1" || string(got.Body()) != `for "y"` {
		t.Fatalf("y got %v", got)
	}
}
