package cosmix

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

func TestRegisterAnswersAsNodedAndAnnouncesTheServiceWithItsProvenance(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	prov := `{"binary":"cosmix-maild","version":"0.2.1","git_sha":"abc123","git_dirty":false,"build_time":"2026-01-01T00:00:00Z","pid":4242,"started_at":"2026-01-02T00:00:00Z"}`
	a.send("---\ncommand: noded.register\nfrom: maild\nid: 1\nto: noded\ntype: request\n---\n" + prov + "\n")
	a.expect("---\ncommand: noded.register\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{\"registered\": \"maild\"}\n")

	infos, err := e.node("alpha").Whois(ctxT(t), "maild")
	if err != nil || len(infos) != 1 {
		t.Fatalf("whois maild: %v %v", infos, err)
	}
	in := infos[0]
	if in.Version != "0.2.1" || len(in.Channels) != 1 || in.Channels[0] != CallChannel {
		t.Fatalf("record %+v", in)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(in.Meta, &meta); err != nil || string(meta["cosmix"]) != prov {
		t.Fatalf("meta %s: %v", in.Meta, err)
	}
}

func TestRegisterOfATakenNameIsRC10AndKeepsTheConnection(t *testing.T) {
	e := start(t, nil)
	e.dial().register("service-a", 1)
	b := e.dial()
	b.send(registerFrame)
	b.expect("---\nerror: service name 'service-a' is already registered\nfrom: noded\nid: 1\nrc: 10\ntype: response\n---\n" +
		`{"error_code":"NAME_TAKEN","message":"service name 'service-a' is already registered","schema":"noded.registration-rejection.v1"}` + "\n")
	b.send("---\ncommand: noded.ping\nfrom: anonymous\nid: 2\nto: noded\ntype: request\n---\n")
	b.expect("---\ncommand: noded.ping\nfrom: noded\nid: 2\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
}

func TestRegisterOfANameABusbarNodeAnnouncesIsRC10(t *testing.T) {
	e := start(t, nil)
	alpha := e.node("alpha")
	if _, err := alpha.Announce(ctxT(t), announcement("service-a")); err != nil {
		t.Fatal(err)
	}
	a := e.dial()
	a.send(registerFrame)
	if m := a.recvMsg(); m.Value("rc") != "10" || m.Value("error") != "service name 'service-a' is already registered" {
		t.Fatalf("got %v", m)
	}
}

func TestRegisterAgainUnderTheSameNameIsAccepted(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	a.register("service-a", 2)
}

func TestRegisterUnderAnotherNameMovesTheService(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	a.register("service-c", 2)
	alpha := e.node("alpha")
	e.awaitService(alpha, "service-a", true)
	e.awaitService(alpha, "service-c", false)
}

func TestRegisterWithoutFromIsRC10(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: noded.register\nid: 1\nto: noded\ntype: request\n---\n")
	a.expect("---\nerror: noded.register requires 'from' header\nfrom: noded\nid: 1\nrc: 10\ntype: response\n---\n")
}

func TestRegisterOfANameBusbarCannotAddressIsRC10(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: noded.register\nfrom: mail-\nid: 1\nto: noded\ntype: request\n---\n")
	m := a.recvMsg()
	if m.Value("rc") != "10" || !strings.HasPrefix(m.Value("error"), "service name 'mail-' is not a busbar service name: ") {
		t.Fatalf("got %v", m)
	}
}

// noded's rule, ^[a-z][a-z0-9-]{1,30}$, and its text word for word, at
// and just past each edge.
func TestRegisterFollowsNodedsServiceNameRule(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	refusal := "---\nerror: noded.register 'from' must match ^[a-z][a-z0-9-]{1,30}$\nfrom: noded\nid: 1\nrc: 10\ntype: response\n---\n"
	longest := "m" + strings.Repeat("x", MaxServiceNameLen-1)
	for _, name := range []string{"m", longest + "x", "Mail_D", "mail_d", "1mail", "-mail", "mAil"} {
		a.send("---\ncommand: noded.register\nfrom: " + name + "\nid: 1\nto: noded\ntype: request\n---\n")
		a.expect(refusal)
	}
	for i, name := range []string{"mx", longest, "m-1"} {
		e.dial().register(name, i+1)
	}
}

func TestDeregisterWithdrawsTheServiceAndIsIdempotent(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	a.send("---\ncommand: noded.deregister\nfrom: service-a\nid: 2\nto: noded\ntype: request\n---\n")
	a.expect("---\ncommand: noded.deregister\nfrom: noded\nid: 2\nrc: 0\ntype: response\n---\n{\"deregistered\": \"service-a\"}\n")
	e.awaitService(e.node("alpha"), "service-a", true)
	a.send("---\ncommand: noded.deregister\nfrom: service-a\nid: 3\nto: noded\ntype: request\n---\n")
	a.expect("---\ncommand: noded.deregister\nfrom: noded\nid: 3\nrc: 0\ntype: response\n---\n{\"deregistered\": null}\n")
	// The name is free for another connection now.
	e.dial().register("service-a", 1)
}

func TestDisconnectWithdrawsTheService(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	alpha := e.node("alpha")
	e.awaitService(alpha, "service-a", false)
	_ = a.ws.CloseNow()
	e.awaitService(alpha, "service-a", true)
}

func TestUnknownNodedCommandIsRC10(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: noded.props.get\nid: 7\nto: noded\ntype: request\n---\n")
	a.expect("---\nerror: Unknown noded command: 'noded.props.get'\nfrom: noded\nid: 7\nrc: 10\ntype: response\n---\n")
}

func TestNodedAnswersUnderItsAddressFormsToo(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	for i, to := range []string{"noded", "noded." + e.bus.Broker.Name() + ".bus", e.bus.Broker.Name() + ".bus", ""} {
		h := map[string]string{"command": "noded.ping", "id": itoa(i + 1), "type": "request"}
		if to != "" {
			h["to"] = to
		}
		a.send(frame(h, ""))
		a.expect("---\ncommand: noded.ping\nfrom: noded\nid: " + itoa(i+1) + "\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
	}
}

func TestListAnswersEveryServiceInTheClientsShape(t *testing.T) {
	e := start(t, nil)
	alpha := e.node("alpha")
	ann := announcement("geo")
	ann.Version = "2.1.0"
	ann.Channels = []string{"geo.lookup"}
	if _, err := alpha.Announce(ctxT(t), ann); err != nil {
		t.Fatal(err)
	}
	a := e.dial()
	a.send("---\ncommand: noded.register\nfrom: service-a\nid: 1\nto: noded\ntype: request\n---\n{\"version\":\"1.0\",\"pid\":7}\n")
	a.recvMsg()
	a.send("---\ncommand: noded.list\nfrom: service-a\nid: 2\nto: noded\ntype: request\n---\n")
	m := a.recvMsg()
	if m.Value("rc") != "0" || m.Value("command") != "noded.list" || m.Value("id") != "2" || m.Value("from") != "noded" {
		t.Fatalf("reply %v", m)
	}
	var list []map[string]json.RawMessage
	// The busbar node alpha, its service geo, the cosmix app service-a
	// (not the app's own node, cosmix-…).
	if err := json.Unmarshal(m.Body(), &list); err != nil || len(list) != 3 {
		t.Fatalf("body %s: %v", m.Body(), err)
	}
	if string(list[0]["name"]) != `"alpha"` || string(list[0]["meta"]) != `{"address":"alpha.bus","handlers":[],"kind":"node"}` {
		t.Errorf("alpha: %s", m.Body())
	}
	if string(list[1]["name"]) != `"geo"` || string(list[1]["version"]) != `"2.1.0"` || string(list[1]["schema_version"]) != "1" {
		t.Errorf("geo: %s", m.Body())
	}
	if string(list[2]["name"]) != `"service-a"` || string(list[2]["version"]) != `"1.0"` || string(list[2]["pid"]) != "7" || list[2]["registered_at"] == nil {
		t.Errorf("service-a: %s", m.Body())
	}
	if !strings.Contains(string(m.Body()), `{"name":"geo","version":"2.1.0","registered_at":`) {
		t.Errorf("field order: %s", m.Body())
	}
}

func TestInfoAnswersTheBrokersNodeInfo(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	a.send("---\ncommand: noded.info\nfrom: service-a\nid: 2\nto: noded\ntype: request\n---\n")
	m := a.recvMsg()
	var info struct {
		Node  string `json:"node"`
		Noded struct {
			Name, Binary, Version string
		} `json:"noded"`
		ServiceCount  int `json:"service_count"`
		SchemaVersion int `json:"schema_version"`
	}
	if err := json.Unmarshal(m.Body(), &info); err != nil || m.Value("rc") != "0" || m.Value("command") != "noded.info" {
		t.Fatalf("%v: %v", m, err)
	}
	if info.Node != e.bus.Broker.Name() || info.Noded.Name != "noded" || info.Noded.Binary != "busbar" ||
		info.Noded.Version != "test" || info.ServiceCount != 1 || info.SchemaVersion != 1 {
		t.Fatalf("info %s", m.Body())
	}
}

func TestCloseEndsEveryConnectionAndItsService(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	alpha := e.node("alpha")
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.ws.Read(ctxT(t)); err == nil {
		t.Fatal("the connection is still open after Close")
	}
	e.awaitService(alpha, "service-a", true)
	if ws, _, err := websocket.Dial(ctxT(t), e.url(), nil); err == nil {
		_ = ws.CloseNow()
		t.Fatal("a connection was taken after Close")
	}
}

func TestUISubscribeIsAcceptedAndNotRoutedAsNodedDoes(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("panel", 1)
	a.send("---\ncommand: ui.subscribe\nid: 2\nto: noded\ntype: request\n---\nsource: editor\naction: save\n")
	a.expect("---\ncommand: ui.subscribe\nfrom: noded\nid: 2\nrc: 5\ntype: response\n---\n{\"subscription_id\": \"panel::ui::editor::save\", \"warning\": \"registered_but_not_routed\"}\n")
	a.send("---\ncommand: ui.subscribe\nid: 3\nto: noded\ntype: request\n---\naction: save\n")
	a.expect("---\ncommand: ui.subscribe\nerror: ui.subscribe requires 'source' in body\nfrom: noded\nid: 3\nrc: 10\ntype: response\n---\n")
	a.send("---\ncommand: ui.unsubscribe\nid: 4\nto: noded\ntype: request\n---\nsource: editor\n")
	a.expect("---\ncommand: ui.unsubscribe\nfrom: noded\nid: 4\nrc: 0\ntype: response\n---\n{}\n")
}
