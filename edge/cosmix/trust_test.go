package cosmix

import (
	"net/http"
	"testing"

	"busbar/auth"
)

// app may be any cosmix-* node, take calls on cosmix:*, and call geo.*
// and cosmix services; "nocalls" may not take calls; "elsewhere" may not
// be a cosmix-* node.
var (
	appPrincipal = auth.Principal{Name: "app", Nodes: []auth.Pattern{"cosmix-*"}, Permissions: auth.Permissions{
		Handle: []auth.Pattern{"cosmix:*"}, Subscribe: []auth.Pattern{"cosmix:*"},
		Request: []auth.Pattern{"cosmix:*", "geo.*"}, Send: []auth.Pattern{"cosmix:*"}}}
	noCalls   = auth.Principal{Name: "nocalls", Nodes: []auth.Pattern{"cosmix-*"}, Permissions: auth.Permissions{Request: []auth.Pattern{">"}}}
	elsewhere = auth.Principal{Name: "elsewhere", Nodes: []auth.Pattern{"web-*"}, Permissions: auth.AllPermissions()}
)

func TestEachConnectionHasItsPrincipalsPermissions(t *testing.T) {
	e := start(t, nil, appPrincipal, noCalls, elsewhere)
	if got := dialStatus(t, e.urlAs("nocalls"), nil); got != http.StatusForbidden {
		t.Errorf("a principal that may not take calls: %d, want 403", got)
	}
	if got := dialStatus(t, e.urlAs("elsewhere"), nil); got != http.StatusUnauthorized {
		t.Errorf("a principal that may not be a cosmix-* node: %d, want 401", got)
	}
	a := e.dialURL(e.urlAs("app"))
	a.register("service-a", 1)
	a.send("---\ncommand: orders.create\nid: 2\nto: alpha.bus\ntype: request\n---\n")
	m := a.recvMsg()
	if m.Value("rc") != "10" || m.Value("id") != "2" {
		t.Fatalf("a call the principal may not make: %v", m)
	}
	t.Log(m.Value("error"))
}
