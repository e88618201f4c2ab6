//go:build linux || darwin || freebsd

package cosmix

// The native socket behind the edge: its accept loop, the retained
// replay, and the refusals a native peer can cause, counted under
// DoorUnix.

import (
	"net"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"busbar/edge"
	"busbar/edge/edgetest"
	"busbar/internal/testbroker"
)

// A native app that subscribes after a publication with a forged
// broker_principal is replayed the frame without it: the verified client
// would believe one.
func TestARetainedTopicFrameReachesANativeAppWithoutAForgedPrincipal(t *testing.T) {
	u := startUnix(t)
	live := u.dialUnix()
	live.send("---\ncommand: topic.subscribe\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n")
	if m := live.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("subscribe: %v", m)
	}
	for i, pub := range []*app{u.dialUnix(), u.dial()} { // a native publisher and a loopback one
		pub.send("---\ncommand: topic.publish\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n" + forgedTopic)
		if m := pub.recvMsg(); m.Value("rc") != "0" {
			t.Fatalf("publish: %v", m)
		}
		want := strings.Replace(strippedTopic, "topic_seq: 1", "topic_seq: "+itoa(i+1), 1)
		live.expect(want)
		late := u.dialUnix()
		late.send("---\ncommand: topic.subscribe\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n")
		if m := late.recvMsg(); m.Value("rc") != "0" || !strings.Contains(string(m.Body()), `"replayed": true`) {
			t.Fatalf("late subscribe: %v", m)
		}
		late.expect(want)
	}
}

// The socket's accept loop is the edge's: a temporary failure is counted
// under DoorUnix and retried; a binary message is refused there too.
func TestTheSocketsAcceptLoopIsTheEdgesAndItsRefusalsAreCountedUnderItsDoor(t *testing.T) {
	before := edge.AcceptFailures()[DoorUnix]
	u := startUnixWith(t, func(ln net.Listener) net.Listener { return edgetest.EMFILE(ln, 1) })
	a := u.dialUnix()
	a.send("---\ncommand: noded.ping\nid: 1\nto: noded\ntype: request\n---\n")
	if m := a.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("ping: %v", m)
	}
	if got := edge.AcceptFailures()[DoorUnix] - before; got != 1 {
		t.Fatalf("%d accept failures counted for %s, want 1", got, DoorUnix)
	}
	if err := a.ws.Write(ctxT(t), websocket.MessageBinary, []byte("binary")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.ws.Read(ctxT(t)); websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("after a binary message: %v", err)
	}
	testbroker.Eventually(t, wait, "the binary message counted", func() bool {
		return u.srv.Stats().Refused[Refusal{DoorUnix, RefusedBinary}] == 1
	})
}
