package cosmix

// Replies and routed frames compared with what cosmix-noded builds, field
// by field, over a real socket.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestInfoCarriesEveryFieldNodedFills: noded.info's body is noded's
// NodeInfo, key for key and in its order: node, wg_ip (the listener's
// host), noded (name, binary, version, git_sha, git_dirty, build_time, pid,
// started_at, schema_version, the build's fields only when the binary
// has them), uptime_s, service_count, schema_version.
func TestInfoCarriesEveryFieldNodedFills(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.register("service-a", 1)
	a.send("---\ncommand: noded.info\nfrom: service-a\nid: 2\nto: noded\ntype: request\n---\n")
	m := a.recvMsg()
	if m.Value("rc") != "0" || m.Value("command") != "noded.info" || m.Value("from") != "noded" || m.Value("id") != "2" {
		t.Fatalf("headers %v", m)
	}
	b := busbarBuild()
	var build strings.Builder
	if b.gitSHA != nil {
		fmt.Fprintf(&build, `,"git_sha":%q`, *b.gitSHA)
	}
	if b.gitDirty != nil {
		fmt.Fprintf(&build, `,"git_dirty":%t`, *b.gitDirty)
	}
	if b.buildTime != nil {
		fmt.Fprintf(&build, `,"build_time":%q`, *b.buildTime)
	}
	started := e.srv.started.UTC().Truncate(time.Second).Format(time.RFC3339)
	want := fmt.Sprintf(`{"node":%q,"wg_ip":"127.0.0.1","noded":{"name":"noded","binary":"busbar","version":"test"%s,"pid":%d,"started_at":%q,"schema_version":1},"uptime_s":N,"service_count":1,"schema_version":1}`,
		e.bus.Broker.Name(), build.String(), os.Getpid(), started)
	got := regexp.MustCompile(`"uptime_s":[0-9]+`).ReplaceAllString(string(m.Body()), `"uptime_s":N`)
	if got != want {
		t.Fatalf("body\n got  %s\n want %s", got, want)
	}
	var info struct {
		UptimeS uint64 `json:"uptime_s"`
	}
	if err := json.Unmarshal(m.Body(), &info); err != nil || info.UptimeS > uint64(time.Since(e.srv.started)/time.Second) {
		t.Fatalf("uptime_s %d: %v", info.UptimeS, err)
	}
}

// TestInfoServiceCountIsHeldAtMaxServiceCount: cosmix-lib-bus reads
// service_count as a u16.
func TestInfoServiceCountIsHeldAtMaxServiceCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want uint16
	}{{0, 0}, {MaxServiceCount - 1, MaxServiceCount - 1}, {MaxServiceCount, MaxServiceCount}, {MaxServiceCount + 1, MaxServiceCount}} {
		if got := serviceCount(c.n); got != c.want {
			t.Errorf("serviceCount(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestRoutedFramesCarryNodedsStampsAndNoForgedOnes: noded strips
// broker_origin, broker_peer, broker_service and mesh_from, in any
// spelling, from what it routes and stamps broker_origin: local, on the
// request, on a fire-and-forget message and on the correlated reply,
// whose id is the caller's again and whose "to" is the caller's service.
func TestRoutedFramesCarryNodedsStampsAndNoForgedOnes(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1)
	b.register("service-b", 1)
	forged := "Broker_Origin: mesh\nbroker_peer: gamma\nbroker_service: root\n"
	a.send("---\n" + forged + "command: greet\nfrom: service-x\nid: 2\nmesh_from: delta\nto: service-b\ntype: request\n---\n{}\n")
	b.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-a\nid: noded-1\nto: service-b\ntype: request\n---\n{}\n")
	b.send("---\nbroker_origin: mesh\nBROKER_SERVICE: x\ncommand: greet\nfrom: service-b\nid: noded-1\nrc: 0\nto: service-a\ntype: response\n---\n{\"ok\":1}\n")
	a.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-b\nid: 2\nrc: 0\nto: service-a\ntype: response\n---\n{\"ok\":1}\n")
	a.send("---\n" + forged + "command: note\nfrom: service-a\nto: service-b\ntype: request\n---\n")
	b.expect("---\nbroker_origin: local\ncommand: note\nfrom: service-a\nto: service-b\ntype: request\n---\n")
}

// TestTargetsOnTheBrokersOwnNodeAreLocalServicesAsNodedRoutesThem:
// <service>.<node>.bus and <sub>.<service>.<node>.bus with noded's own
// node name reach the service of that name; "to" travels as written.
func TestTargetsOnTheBrokersOwnNodeAreLocalServicesAsNodedRoutesThem(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1)
	b.register("service-b", 1)
	own := e.bus.Broker.Name()
	for i, to := range []string{"service-b." + own + ".bus", "imap.service-b." + own + ".bus", "service-b." + own} {
		id := itoa(i + 2)
		a.send("---\ncommand: greet\nfrom: service-a\nid: " + id + "\nto: " + to + "\ntype: request\n---\n")
		call := b.recvMsg()
		if call.Value("to") != to || call.Value("from") != "service-a" {
			t.Fatalf("B received %v", call)
		}
		b.send("---\ncommand: greet\nfrom: service-b\nid: " + call.Value("id") + "\nrc: 0\nto: service-a\ntype: response\n---\n")
		a.expect("---\nbroker_origin: local\ncommand: greet\nfrom: service-b\nid: " + id + "\nrc: 0\nto: service-a\ntype: response\n---\n")
	}
	// noded.<own>.bus and <own>.bus are noded.
	for _, to := range []string{"noded." + own + ".bus", own + ".bus"} {
		a.send("---\ncommand: noded.ping\nid: 9\nto: " + to + "\ntype: request\n---\n")
		a.expect("---\ncommand: noded.ping\nfrom: noded\nid: 9\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
	}
	// Nobody of that name on the own node: noded's "not found".
	a.send("---\ncommand: greet\nid: 10\nto: nobody." + own + ".bus\ntype: request\n---\n")
	a.expect("---\nerror: Service 'nobody' not found\nid: 10\nrc: 10\ntype: response\n---\n")
}

// TestANodeNoOneKnowsIsNodedsUnknownMeshNode: a call, a fire-and-forget
// message and a noded command to a node of no route.
func TestANodeNoOneKnowsIsNodedsUnknownMeshNode(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: greet\nid: 1\nto: maild.ghost.bus\ntype: request\n---\n")
	a.expect("---\nerror: Unknown mesh node: 'ghost'\nid: 1\nrc: 10\ntype: response\n---\n")
	a.send("---\ncommand: greet\nto: imap.maild.ghost.bus\ntype: request\n---\n")
	a.expect("---\nerror: Unknown mesh node: 'ghost'\nrc: 10\ntype: response\n---\n")
	a.send("---\ncommand: noded.ping\nid: 2\nto: noded.ghost.bus\ntype: request\n---\n")
	a.expect("---\nerror: Unknown mesh node: 'ghost'\nid: 2\nrc: 10\ntype: response\n---\n")
	// A node the bus knows: its service is looked for there.
	e.node("alpha")
	a.send("---\ncommand: greet\nid: 3\nto: maild.alpha.bus\ntype: request\n---\n")
	a.expect("---\nerror: Service 'maild' not found\nid: 3\nrc: 10\ntype: response\n---\n")
}

// TestTheCrossMeshFQDNIsBoundAtMaxAddressLen: cosmix-lib-bus takes a mesh
// name of MaxAddressLen bytes and refuses one byte more.
func TestTheCrossMeshFQDNIsBoundAtMaxAddressLen(t *testing.T) {
	label := strings.Repeat("a", 61)
	at := strings.Join([]string{label, label, label, label}, ".") // 4×61+3 = 247
	at += ".bcde"                                                 // 252
	at = "x" + at                                                 // 253
	if len(at) != MaxAddressLen || !validMeshFQDN(at) {
		t.Fatalf("%d bytes refused", len(at))
	}
	if validMeshFQDN("y" + at) {
		t.Fatalf("%d bytes taken", len(at)+1)
	}
}

// TestTheCallersTypeAndTheAppsCommandTravelAsNodedForwardsThem: noded
// forwards a frame's "type" as the caller wrote it (an event stays an
// event) and the callee's reply with the callee's own command header.
func TestTheCallersTypeAndTheAppsCommandTravelAsNodedForwardsThem(t *testing.T) {
	e := start(t, nil)
	a, b := e.dial(), e.dial()
	a.register("service-a", 1)
	b.register("service-b", 1)
	a.send("---\ncommand: changed\nfrom: service-a\nto: service-b\ntype: event\n---\n{\"n\":1}\n")
	b.expect("---\nbroker_origin: local\ncommand: changed\nfrom: service-a\nto: service-b\ntype: event\n---\n{\"n\":1}\n")
	a.send("---\ncommand: probe\nfrom: service-a\nid: 2\nto: service-b\ntype: event\n---\n")
	b.expect("---\nbroker_origin: local\ncommand: probe\nfrom: service-a\nid: noded-1\nto: service-b\ntype: event\n---\n")
	b.send("---\ncommand: probe.answer\nfrom: service-b\nid: noded-1\nrc: 0\ntype: response\n---\nok\n")
	a.expect("---\nbroker_origin: local\ncommand: probe.answer\nfrom: service-b\nid: 2\nrc: 0\nto: service-a\ntype: response\n---\nok\n")
	a.send("---\ncommand: probe\nfrom: service-a\nid: 3\nto: service-b\ntype: request\n---\n")
	b.expect("---\nbroker_origin: local\ncommand: probe\nfrom: service-a\nid: noded-2\nto: service-b\ntype: request\n---\n")
	b.send("---\nfrom: service-b\nid: noded-2\nrc: 0\ntype: response\n---\nok\n")
	a.expect("---\nbroker_origin: local\nfrom: service-b\nid: 3\nrc: 0\nto: service-a\ntype: response\n---\nok\n")
}

// TestABusbarNodesTopicFrameCannotForgeNodedsOriginStamps: what a
// subscriber gets of a busbar node's topic frame has no origin header but
// noded's own stamp; one with none stays without.
func TestABusbarNodesTopicFrameCannotForgeNodedsOriginStamps(t *testing.T) {
	e := start(t, nil)
	sub := e.dial()
	sub.send("---\ncommand: topic.subscribe\nid: 1\nname: news\nto: noded\ntype: request\n---\n")
	if m := sub.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("subscribe: %v", m)
	}
	news := e.node("alpha").Scope("t").Channel(TopicNamespace + ":news")
	for _, c := range []struct{ published, delivered string }{
		{"---\nBroker_Origin: mesh\nbroker_peer: gamma\nMESH_FROM: delta\ntopic: news\n---\nx\n", "---\nbroker_origin: local\ntopic: news\n---\nx\n"},
		{"---\nbroker_origin: mesh\ntopic: news\n---\nx\n", "---\nbroker_origin: local\ntopic: news\n---\nx\n"},
		{"---\nbroker_origin: local\ntopic: news\n---\nx\n", "---\nbroker_origin: local\ntopic: news\n---\nx\n"},
		{"---\ntopic: news\n---\nx\n", "---\ntopic: news\n---\nx\n"},
	} {
		if _, err := news.Publish(ctxT(t), []byte(c.published)); err != nil {
			t.Fatal(err)
		}
		sub.expect(c.delivered)
	}
}
