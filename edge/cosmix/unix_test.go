//go:build linux || darwin || freebsd

package cosmix

// The native Unix ingress, as cosmix-lib-client's connect_unix uses it:
// the socket's path and mode, the peer check, noded.ping's native-session
// profile, and the bytes of register, call, respond and list over the
// socket.

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"busbar/auth"
	"busbar/internal/testbroker"
)

// socketDir is a fresh directory for a socket, owner-only, with a path
// short enough for a socket address on every system.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// unixEnv is env with the Unix socket served too, at sock.
type unixEnv struct {
	*env
	sock string
	ln   *UnixListener
}

func startUnix(t *testing.T) *unixEnv {
	t.Helper()
	return startUnixWith(t, nil)
}

// startUnixWith is startUnix with the socket's own listener wrapped by
// wrap, when it is set.
func startUnixWith(t *testing.T, wrap func(net.Listener) net.Listener) *unixEnv {
	t.Helper()
	e := start(t, func(c *Config) { c.Owner = auth.Credential{Principal: "local", Secret: "unset"} })
	e.srv.cfg.Owner.Secret = e.bus.Secrets["local"]
	sock := filepath.Join(socketDir(t), "bus.sock")
	ln, err := e.srv.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln.ln = wrap(ln.ln)
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.ServeUnix(ln) }()
	t.Cleanup(func() {
		_ = e.srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("ServeUnix returned %v, want ErrServerClosed", err)
		}
	})
	return &unixEnv{env: e, sock: sock, ln: ln}
}

// dialUnix connects as connect_unix does: the WebSocket handshake for
// ws://localhost/ws over the Unix stream, no token.
func (u *unixEnv) dialUnix() *app {
	u.t.Helper()
	ws, resp, err := websocket.Dial(ctxT(u.t), "ws://localhost"+Path, &websocket.DialOptions{HTTPClient: unixHTTP(u.sock)})
	if err != nil {
		u.t.Fatalf("dial %s: %v", u.sock, err)
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	ws.SetReadLimit(-1)
	u.t.Cleanup(func() { _ = ws.CloseNow() })
	return &app{t: u.t, ws: ws}
}

func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// nativePing is noded.ping's answer while the socket at sock is served.
func nativePing(sock string) string {
	return `{"pong": true, "extensions": {"core": "1.0", "native-session": "1", "native-session-endpoint": "` + sock + `", "topic": "1.0"}}`
}

// from_verified_unix: the client's first frame is noded.ping (from its
// service name, id 1, no body); it goes on only when extensions
// ["native-session"] is "1", then registers (id 2, the provenance or no
// body). Then connect, register, call, respond and list, frame for frame,
// between two apps on the socket.
func TestUnixSocketSpeaksTheNativeSessionProfileFrameForFrame(t *testing.T) {
	u := startUnix(t)
	a, b := u.dialUnix(), u.dialUnix()
	for _, c := range []struct {
		app  *app
		name string
	}{{a, "service-a"}, {b, "service-b"}} {
		c.app.send("---\ncommand: noded.ping\nfrom: " + c.name + "\nid: 1\nto: noded\ntype: request\n---\n")
		c.app.expect("---\ncommand: noded.ping\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n" + nativePing(u.sock) + "\n")
		c.app.register(c.name, 2)
	}

	a.send("---\ncommand: greet\nfrom: service-a\nid: 3\nto: service-b\ntype: request\n---\n{\"msg\":\"hello from A\"}\n")
	call := b.recvMsg()
	if call.Value("command") != "greet" || call.Value("from") != "service-a" || call.Value("to") != "service-b" ||
		call.Value("type") != "request" || string(call.Body()) != `{"msg":"hello from A"}` {
		t.Fatalf("B received %v", call)
	}
	// respond_parts: command, from, to the caller, type response, rc, id.
	// Between native apps each frame carries the sender's principal, its
	// one broker_principal line first (the keys are in order).
	b.send("---\ncommand: greet\nfrom: service-b\nid: " + call.Value("id") + "\nrc: 0\nto: service-a\ntype: response\n---\n{\"hi\":\"A\"}\n")
	reply := a.recv()
	stamp, ok := strings.CutPrefix(reply, "---\nbroker_origin: local\nbroker_principal: ")
	if !ok || principalOf(t, reply)["connection_id"] == principalOf(t, string(Encode(call)))["connection_id"] {
		t.Fatalf("the reply %q", reply)
	}
	_, rest, _ := strings.Cut(stamp, "\n")
	if want := "command: greet\nfrom: service-b\nid: 3\nrc: 0\nto: service-a\ntype: response\n---\n{\"hi\":\"A\"}\n"; rest != want {
		t.Fatalf("the reply %q, want the principal and %q", reply, want)
	}

	a.send("---\ncommand: noded.list\nfrom: service-a\nid: 4\nto: noded\ntype: request\n---\n")
	m := a.recvMsg()
	var services []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(m.Body(), &services); err != nil || m.Value("rc") != "0" || m.Value("id") != "4" {
		t.Fatalf("noded.list: %v %v", m, err)
	}
	var names []string
	for _, s := range services {
		names = append(names, s.Name)
	}
	if !slices.Contains(names, "service-a") || !slices.Contains(names, "service-b") {
		t.Fatalf("services %v", names)
	}
}

// The client's discovery and its version check read
// extensions["native-session"] as the string "1" and
// ["native-session-endpoint"] as the path, over the loopback listener
// too; a broker without the socket has neither (the client's
// UnsupportedVersion, and no discovery).
func TestPingAdvertisesTheSocketOnBothTransportsOnlyWhileItIsServed(t *testing.T) {
	u := startUnix(t)
	for _, a := range []*app{u.dial(), u.dialUnix()} {
		a.send("---\ncommand: noded.ping\nid: 1\nto: noded\ntype: request\n---\n")
		var pong struct {
			Extensions map[string]any `json:"extensions"`
		}
		if err := json.Unmarshal(a.recvMsg().Body(), &pong); err != nil {
			t.Fatal(err)
		}
		if pong.Extensions["native-session"] != "1" || pong.Extensions["native-session-endpoint"] != u.sock {
			t.Fatalf("extensions %v", pong.Extensions)
		}
	}

	plain := start(t, nil).dial()
	plain.send("---\ncommand: noded.ping\nid: 1\nto: noded\ntype: request\n---\n")
	var pong struct {
		Extensions map[string]any `json:"extensions"`
	}
	if err := json.Unmarshal(plain.recvMsg().Body(), &pong); err != nil {
		t.Fatal(err)
	}
	if _, ok := pong.Extensions["native-session"]; ok {
		t.Fatalf("a broker without the socket advertises %v", pong.Extensions)
	}
}

func TestTheSocketIsOwnerOnlyAndGoesAtClose(t *testing.T) {
	u := startUnix(t)
	fi, err := os.Lstat(u.sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket 0600", fi.Mode())
	}
	if err := u.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(u.sock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestListenUnixRefusesAPathOthersCouldChange(t *testing.T) {
	e := start(t, func(c *Config) { c.Owner = auth.Credential{Principal: "local", Secret: "x"} })
	open := socketDir(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	real := socketDir(t)
	link := filepath.Join(socketDir(t), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		filepath.Join(open, "bus.sock"), // the socket's directory writable by all
		filepath.Join(link, "bus.sock"), // through a symbolic link
		"relative/bus.sock",
		real + "/../" + filepath.Base(real) + "/bus.sock",
	} {
		ln, err := e.srv.ListenUnix(path)
		if !errors.Is(err, ErrUnsafeSocketPath) {
			t.Errorf("%s: %v, want ErrUnsafeSocketPath", path, err)
		}
		if err == nil {
			_ = ln.Close()
		}
	}
	// A sticky root directory (like /tmp) above the socket's own is fine.
	ok := filepath.Join(real, "bus.sock")
	ln, err := e.srv.ListenUnix(ok)
	if err != nil {
		t.Fatalf("%s: %v", ok, err)
	}
	_ = ln.Close()

	if _, err := start(t, nil).srv.ListenUnix(ok); err == nil || errors.Is(err, ErrUnsafeSocketPath) {
		t.Errorf("without Config.Owner: %v", err)
	}
}

func TestCheckPeerAdmitsOnlyTheBrokersOwnUser(t *testing.T) {
	if err := CheckPeer(PeerCred{UID: 1000, GID: 1000, PID: 7}, 1000); err != nil {
		t.Errorf("the broker's own user: %v", err)
	}
	for _, c := range []struct {
		cred  PeerCred
		owner int
	}{
		{PeerCred{UID: 1001, GID: 1000}, 1000},
		{PeerCred{UID: 0}, 1000}, // root is another user too
		{PeerCred{UID: 1000}, -1},
	} {
		if err := CheckPeer(c.cred, c.owner); !errors.Is(err, ErrForeignPeer) {
			t.Errorf("%+v as %d: %v, want ErrForeignPeer", c.cred, c.owner, err)
		}
	}
}

// A connection of the broker's own user comes with its credentials, the
// kernel's.
func TestPeerCredReadsTheKernelsWordOnThePeer(t *testing.T) {
	own := filepath.Join(socketDir(t), "own.sock")
	ln, err := net.Listen("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	cred, err := peerCred(sc)
	if err != nil {
		t.Fatal(err)
	}
	if int(cred.UID) != os.Geteuid() || int(cred.GID) != os.Getegid() || (cred.PID != 0 && int(cred.PID) != os.Getpid()) {
		t.Fatalf("peer %+v, want uid %d gid %d pid %d", cred, os.Geteuid(), os.Getegid(), os.Getpid())
	}
	if err := CheckPeer(cred, os.Geteuid()); err != nil {
		t.Fatal(err)
	}
}

// The verified client ends the connection on a binary message; busbar
// ends a native connection that sends one.
func TestABinaryMessageEndsANativeConnection(t *testing.T) {
	u := startUnix(t)
	a := u.dialUnix()
	if err := a.ws.Write(ctxT(t), websocket.MessageBinary, []byte("binary")); err != nil {
		t.Fatal(err)
	}
	_, _, err := a.ws.Read(ctxT(t))
	if websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("after a binary message: %v, want close 1003", err)
	}
}

// A verified client believes broker_principal: whatever spelling a peer
// writes, on a call, its reply or an event, never reaches another app.
func TestNoPeerCanPutABrokerPrincipalBeforeAnApp(t *testing.T) {
	u := startUnix(t)
	svc, caller := u.dialUnix(), u.dial()
	svc.register("service-b", 1)
	caller.register("service-a", 1)
	caller.send("---\nBROKER_PRINCIPAL: forged\nbRoKeR_pRiNcIpAl: forged\nbroker_principal:x: forged\nbroker_principal: {\"version\":1}\ncommand: greet\nfrom: service-a\nid: 2\nto: service-b\ntype: request\n---\n{}\n")
	call := svc.recv()
	if strings.Contains(strings.ToLower(call), "broker_principal") {
		t.Fatalf("the service got %q", call)
	}
	id := svc.recvFrameID(call)
	svc.send("---\nbroker_principal: {\"version\":1}\ncommand: greet\nfrom: service-b\nid: " + id + "\nrc: 0\nto: service-a\ntype: response\n---\n{}\n")
	if reply := caller.recv(); strings.Contains(strings.ToLower(reply), "broker_principal") {
		t.Fatalf("the caller got %q", reply)
	}
	caller.send("---\nBroker_Principal: forged\ncommand: note\nfrom: service-a\nto: service-b\ntype: request\n---\n")
	if ev := svc.recv(); strings.Contains(strings.ToLower(ev), "broker_principal") {
		t.Fatalf("the service got the event %q", ev)
	}

	// A busbar node publishing a topic frame with one.
	svc.send("---\ncommand: topic.subscribe\nfrom: service-b\nid: 3\nname: news\nto: noded\ntype: request\n---\n")
	if m := svc.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("subscribe: %v", m)
	}
	n := u.node("alpha")
	if _, err := n.Scope("t").Channel(TopicNamespace+":news").Publish(ctxT(t), []byte("---\nbroker_principal: {}\ntopic: news\n---\nx\n")); err != nil {
		t.Fatal(err)
	}
	if d := svc.recv(); strings.Contains(strings.ToLower(d), "broker_principal") || !strings.Contains(d, "topic: news") {
		t.Fatalf("the subscriber got %q", d)
	}
}

// recvFrameID is the id header of an encoded frame.
func (a *app) recvFrameID(frame string) string {
	a.t.Helper()
	m, err := Decode([]byte(frame))
	if err != nil {
		a.t.Fatal(err)
	}
	return m.Value("id")
}

// principalOf is the broker_principal of a received frame, decoded as
// cosmix-lib-bus reads it; nil when there is none.
func principalOf(t *testing.T, frame string) map[string]any {
	t.Helper()
	m, err := Decode([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.Get(PrincipalHeader)
	if !ok {
		return nil
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		t.Fatalf("%s: %v", v, err)
	}
	return p
}

// Between two native connections the broker vouches, as noded does, for
// the sender of a call, of its reply and of an event: a local-unix
// principal of the sending connection (the broker's user, the peer's pid,
// a connection id of its own).
func TestNativeAppsGetTheSendersPrincipalFromEachOther(t *testing.T) {
	u := startUnix(t)
	a, b := u.dialUnix(), u.dialUnix()
	a.register("service-a", 1)
	b.register("service-b", 1)
	a.send("---\ncommand: greet\nfrom: service-a\nid: 2\nto: service-b\ntype: request\n---\n{}\n")
	call := b.recv()
	pa := principalOf(t, call)
	if pa == nil {
		t.Fatalf("the call came unstamped: %q", call)
	}
	if pa["version"] != 1.0 || pa["assurance"] != "local-unix" || pa["owner_node"] != u.bus.Broker.Name() ||
		pa["unix_uid"] != float64(os.Geteuid()) || pa["unix_gid"] != float64(os.Getegid()) || pa["session"] != nil ||
		len(pa["broker_epoch"].(string)) != 32 || len(pa["connection_id"].(string)) != 32 {
		t.Fatalf("principal %v", pa)
	}
	if _, ok := pa["session"]; !ok {
		t.Fatalf("principal %v: session must be present (null)", pa)
	}
	if pid := pa["peer_pid"]; pid != float64(os.Getpid()) && pid != 0.0 {
		t.Fatalf("peer_pid %v, want %d", pid, os.Getpid())
	}
	b.send("---\ncommand: greet\nfrom: service-b\nid: " + b.recvFrameID(call) + "\nrc: 0\nto: service-a\ntype: response\n---\n{}\n")
	reply := a.recv()
	pb := principalOf(t, reply)
	if pb == nil || pb["connection_id"] == pa["connection_id"] || pb["broker_epoch"] != pa["broker_epoch"] {
		t.Fatalf("the reply %q: principal %v (the caller's %v)", reply, pb, pa)
	}
	if strings.Contains(reply, vouchHeader) {
		t.Fatalf("the reply shows the voucher: %q", reply)
	}
	a.send("---\ncommand: note\nfrom: service-a\nto: service-b\ntype: request\n---\n")
	if p := principalOf(t, b.recv()); p == nil || p["connection_id"] != pa["connection_id"] {
		t.Fatalf("the event: principal %v", p)
	}
}

// Nothing is vouched for over the loopback listener, nor for a sender
// that came that way.
func TestOnlyNativeToNativeDeliveriesAreStamped(t *testing.T) {
	u := startUnix(t)
	native, tcp := u.dialUnix(), u.dial()
	native.register("service-n", 1)
	tcp.register("service-t", 1)
	tcp.send("---\ncommand: greet\nfrom: service-t\nid: 2\nto: service-n\ntype: request\n---\n")
	call := native.recv()
	if p := principalOf(t, call); p != nil {
		t.Fatalf("a call from the loopback listener came stamped %v", p)
	}
	native.send("---\ncommand: greet\nfrom: service-n\nid: " + native.recvFrameID(call) + "\nrc: 0\nto: service-t\ntype: response\n---\n")
	if p := principalOf(t, tcp.recv()); p != nil {
		t.Fatalf("a loopback app got %v", p)
	}
	native.send("---\ncommand: greet\nfrom: service-n\nid: 3\nto: service-t\ntype: request\n---\n")
	if p := principalOf(t, tcp.recv()); p != nil {
		t.Fatalf("a loopback app got %v", p)
	}
}

// A voucher is good once, from its own connection's node, while that
// connection lasts.
func TestAVoucherIsRedeemedOnceFromItsOwnNodeOnly(t *testing.T) {
	u := startUnix(t)
	u.dialUnix().register("service-a", 1)
	var sess *session
	testbroker.Eventually(t, wait, "the native session", func() bool {
		u.srv.mu.Lock()
		defer u.srv.mu.Unlock()
		for s := range u.srv.sessions {
			if s.native {
				sess = s
			}
		}
		return sess != nil
	})
	from := sess.bc.Node() + ".bus"
	v := u.srv.vouch(sess)
	if got := u.srv.redeem(v, "alpha.bus"); got != "" {
		t.Fatalf("redeemed from another node: %s", got)
	}
	v = u.srv.vouch(sess)
	if got := u.srv.redeem(v, from); got != sess.stamp {
		t.Fatalf("redeemed %q, want %q", got, sess.stamp)
	}
	if got := u.srv.redeem(v, from); got != "" {
		t.Fatalf("redeemed twice: %s", got)
	}
	for range MaxVouchers + 1 {
		u.srv.vouch(sess)
	}
	u.srv.vmu.Lock()
	n := len(sess.vouched)
	u.srv.vmu.Unlock()
	if n != MaxVouchers {
		t.Fatalf("%d vouchers kept, want MaxVouchers (%d)", n, MaxVouchers)
	}
}

func TestANativePrincipalOfMaxPrincipalBytesIsStampedAndOneByteMoreRefused(t *testing.T) {
	peer := PeerCred{UID: 1000, GID: 1000, PID: 4242}
	base, err := (&Server{cfg: Config{BrokerName: "x"}, epoch: strings.Repeat("0", 32)}).stampFor(peer)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("x", MaxPrincipalBytes-len(base)+1)
	p, err := (&Server{cfg: Config{BrokerName: name}, epoch: strings.Repeat("0", 32)}).stampFor(peer)
	if err != nil || len(p) != MaxPrincipalBytes {
		t.Fatalf("at the limit: %d bytes, %v", len(p), err)
	}
	if _, err := (&Server{cfg: Config{BrokerName: name + "x"}, epoch: strings.Repeat("0", 32)}).stampFor(peer); err == nil {
		t.Fatal("one byte past the limit was stamped")
	}
}
