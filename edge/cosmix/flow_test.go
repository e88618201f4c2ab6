package cosmix

import (
	"encoding/json"
	"slices"
	"testing"
)

// cosmix-lib-client's examples/test_noded.rs, frame for frame as
// NodedClient writes and reads them: connect and register two services,
// list them, send from A to B, call noded.ping.
func TestTheClientsTestNodedExampleWorksWithOnlyItsURLChanged(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1) // NodedClient::connect registers with id 1
	b.register("service-b", 1)

	// list_services: call("noded", "noded.list", Null): no body.
	a.send("---\ncommand: noded.list\nfrom: service-a\nid: 2\nto: noded\ntype: request\n---\n")
	m := a.recvMsg()
	var services []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(m.Body(), &services); err != nil || m.Value("rc") != "0" || m.Value("id") != "2" {
		t.Fatalf("noded.list: %v %v", m, err)
	}
	var names []string
	for _, s := range services {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"service-a", "service-b"}) {
		t.Fatalf("services %v", names)
	}

	// send: a request without id.
	a.send("---\ncommand: greet\nfrom: service-a\nto: service-b\ntype: request\n---\n{\"msg\":\"hello from A\"}\n")
	got := b.recvMsg()
	if got.Value("command") != "greet" || got.Value("from") != "service-a" || got.Value("id") != "" || string(got.Body()) != `{"msg":"hello from A"}` {
		t.Fatalf("B received %v", got)
	}

	a.send("---\ncommand: noded.ping\nfrom: service-a\nid: 3\nto: noded\ntype: request\n---\n")
	a.expect("---\ncommand: noded.ping\nfrom: noded\nid: 3\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
}
