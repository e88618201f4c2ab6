package cli

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/edge/moonbridge"
)

// `busbar principal add NAME --moonbridge` stores a MoonBridge key in the
// owner-only principals file and prints it as the backend plugin's
// config.yml takes it.
func TestPrincipalAddMoonBridge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "principals.json")
	if err := os.WriteFile(path, []byte(`{"principals":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "principal", "add", "island-a", "--principals", path, "--moonbridge", "--nodes", "island-a", "--send", "mb:*")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	secret := regexp.MustCompile(`(?m)^secret: "([^"]+)"$`).FindStringSubmatch(out)
	for _, line := range []string{`instanceId: "island-a"`, `backendName: "island-a"`, `keyId: "island-a"`} {
		if !strings.Contains(out, line) {
			t.Fatalf("output lacks %q:\n%s", line, out)
		}
	}
	// No broker runs on its data directory: it says so, and the host
	// and port are placeholders.
	if !strings.Contains(errOut, "no broker with --moonbridge is running") || !strings.Contains(out, "no busbar serve --moonbridge is running") {
		t.Fatalf("principal add without a broker does not say none is running:\n%s\n%s", out, errOut)
	}
	if secret == nil || len(secret[1]) < auth.MinMoonBridgeSecret {
		t.Fatalf("no secret of %d bytes or more:\n%s", auth.MinMoonBridgeSecret, out)
	}
	s, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, got, ok := s.MoonBridgeKey("island-a")
	if !ok || string(got) != secret[1] || !p.MayClaim("island-a") || p.MayClaim("island-b") {
		t.Fatalf("stored key: %v %v", p, ok)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if strings.Contains(errOut, secret[1]) {
		t.Fatal("the secret went to stderr")
	}
	code, out, _ = run(t, "", "principal", "list", "--principals", path)
	if code != 0 || !strings.Contains(out, "moonbridge") || strings.Contains(out, secret[1]) {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, "", "principal", "add", "x", "--principals", path, "--moonbridge", "--out", filepath.Join(t.TempDir(), "c")); code != exitUsage {
		t.Fatalf("--moonbridge with --out: exit %d", code)
	}
}

// mbBackend is a MoonBridge backend speaking the protocol's bytes.
type mbBackend struct {
	t  *testing.T
	nc net.Conn
}

// dialMoonBridge registers name with keyID and secret; error when the
// broker refused (closed the connection).
func dialMoonBridge(t *testing.T, addr, name, keyID, secret string) (*mbBackend, error) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	f, err := moonbridge.ReadFrame(nc)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := moonbridge.DecodeHello(f)
	if err != nil {
		t.Fatal(err)
	}
	reg := moonbridge.Register{InstanceID: name, Name: name, Address: "tcp://127.0.0.1:25565", Generation: moonbridge.NewUUID().String(), KeyID: keyID}
	reg.Signature = moonbridge.Sign([]byte(secret), hello.Nonce, &reg)
	frame, err := moonbridge.EncodeRegister(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := moonbridge.WriteFrame(nc, frame); err != nil {
		t.Fatal(err)
	}
	f, err = moonbridge.ReadFrame(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if _, err := moonbridge.DecodeRegistered(f); err != nil {
		t.Fatal(err)
	}
	return &mbBackend{t: t, nc: nc}, nil
}

func (b *mbBackend) next() any {
	b.t.Helper()
	f, err := moonbridge.ReadFrame(b.nc)
	if err != nil {
		b.t.Fatal(err)
	}
	v, err := moonbridge.Decode(f)
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

func (b *mbBackend) write(frame []byte, err error) {
	b.t.Helper()
	if err == nil {
		err = moonbridge.WriteFrame(b.nc, frame)
	}
	if err != nil {
		b.t.Fatal(err)
	}
}

// TestServeMoonBridge: `busbar serve` with moonbridge in its config file
// takes a backend registered with a key from `busbar principal add
// --moonbridge`, and the CLI's verbs reach it and hear it.
func TestServeMoonBridge(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	cfg := filepath.Join(t.TempDir(), "busbar.toml")
	if err := os.WriteFile(cfg, []byte("moonbridge = \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, data, "--config", cfg)
	m := regexp.MustCompile(`busbar: moonbridge backends on (\S+) \(proxy node broker\)`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("no moonbridge line in:\n%s", s.banner)
	}
	addr := m[1]
	code, out, errOut := s.busbar(t, "", "principal", "add", "island-a", "--moonbridge", "--nodes", "island-a",
		"--send", "mb:*", "--request", "mb:*", "--publish", "mb:*", "--subscribe", "mb:*", "--handle", "mb:ask")
	if code != 0 {
		t.Fatalf("principal add: %s", errOut)
	}
	secret := regexp.MustCompile(`(?m)^secret: "([^"]+)"$`).FindStringSubmatch(out)[1]
	// The port the running broker's --moonbridge listens on, not a
	// default.
	_, port, _ := net.SplitHostPort(addr)
	if !regexp.MustCompile(`(?m)^proxyHost: "127\.0\.0\.1" .*\nproxyPort: `+port+` `).MatchString(out) || strings.Contains(errOut, "placeholders") {
		t.Fatalf("principal add does not print the port in use, %s:\n%s\n%s", port, out, errOut)
	}
	// MoonBridge's proxy requires allowedHosts: without
	// --moonbridge-allow-hosts serve says at start that any host is taken.
	if !strings.Contains(s.stderr.String(), "--moonbridge-allow-hosts is not set") {
		t.Fatalf("no warning about --moonbridge-allow-hosts; stderr:\n%s", s.stderr.String())
	}
	// principal add had the running broker reload its principals: the
	// backend registers at once.
	b, err := dialMoonBridge(t, addr, "island-a", "island-a", secret)
	if err != nil {
		t.Fatalf("the backend does not register once principal add returned: %v", err)
	}
	s.waitLs(t, "island-a's handler", hasNode("island-a", "handlers", "mb:ask"))
	if code, out, _ := s.busbar(t, "", "ls"); code != 0 || !regexp.MustCompile(`(?m)^island-a .*tcp://127\.0\.0\.1:25565$`).MatchString(out) || !strings.Contains(out, "ADVERTISED") {
		t.Fatalf("busbar ls does not show the game address:\n%s", out)
	}
	// Its lease is the adapter's, not busbar's: LEASE "-", never a
	// negative duration.
	if code, out, _ := s.busbar(t, "", "ls"); code != 0 || !regexp.MustCompile(`(?m)^island-a +broker +\d+ +- `).MatchString(out) {
		t.Fatalf("busbar ls LEASE of a MoonBridge backend is not \"-\":\n%s", out)
	}

	// busbar req reaches the backend's handler.
	reqOut, reqDone := s.background(t, "req", "island-a", "mb:ask", "hi")
	f := b.next().(moonbridge.MessageFrame)
	q := f.Message
	if q.Kind != moonbridge.KindRequest || string(q.Payload) != "hi" || q.Source.Proxy {
		t.Fatalf("request: %+v", f)
	}
	self := moonbridge.BackendEndpoint("island-a")
	reply := moonbridge.Message{ID: moonbridge.NewUUID(), Kind: moonbridge.KindReply, Channel: q.Channel, Source: self, Target: &q.Source, ReplyTo: &q.ID, Payload: []byte("re:hi")}
	b.write(moonbridge.EncodeResponse(moonbridge.Response{OperationID: f.OperationID, Type: moonbridge.ResponseReply, Reply: &reply}))
	if err := reqDone(); err != nil || !strings.Contains(reqOut.String(), "re:hi") {
		t.Fatalf("busbar req: %v %s", err, reqOut)
	}

	// The backend's publication reaches busbar sub.
	subOut, subDone := s.background(t, "sub", "mb:news", "--name", "listener", "--count", "1")
	s.waitLs(t, "the subscriber", hasNode("listener", "subscriptions", "mb:news"))
	b.write(moonbridge.EncodeMessage(moonbridge.MessageFrame{OperationID: 1, TimeoutMillis: 5000, Message: moonbridge.Message{
		ID: moonbridge.NewUUID(), Kind: moonbridge.KindEvent, Channel: "mb:news", Source: self, Payload: []byte("news")}}))
	for {
		switch v := b.next().(type) {
		case moonbridge.MessageFrame: // its own copy
			b.write(moonbridge.EncodeResponse(moonbridge.Response{OperationID: v.OperationID, Type: moonbridge.ResponseSend, Result: moonbridge.NoSubscriber}))
			continue
		case moonbridge.Response:
			got := map[string]moonbridge.SendResult{}
			for _, r := range v.Results {
				got[r.Endpoint.String()] = r.Result
			}
			if v.OperationID != 1 || got["backend(listener)"] != moonbridge.Accepted || got["backend(island-a)"] != moonbridge.NoSubscriber {
				t.Fatalf("publish results: %+v", v)
			}
		default:
			t.Fatalf("got %#v", v)
		}
		break
	}
	if err := subDone(); err != nil || !strings.Contains(subOut.String(), "news") {
		t.Fatalf("busbar sub: %v %s", err, subOut)
	}
}

// A MoonBridge backend's failure reaches `busbar req` as its own kind and
// exit status, and its send result `busbar send` as it is: the answers
// are the bytes MoonBridge's client writes.
func TestMoonBridgeCodesThroughCLI(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data, "--moonbridge", "127.0.0.1:0", "--moonbridge-allow-hosts", "127.0.0.1")
	addr := regexp.MustCompile(`busbar: moonbridge backends on (\S+) `).FindStringSubmatch(s.banner)[1]
	if strings.Contains(s.stderr.String(), "--moonbridge-allow-hosts is not set") {
		t.Fatalf("warned although --moonbridge-allow-hosts is set:\n%s", s.stderr.String())
	}
	code, out, errOut := s.busbar(t, "", "principal", "add", "island-c", "--moonbridge", "--nodes", "island-c",
		"--subscribe", "mb:*", "--handle", "mb:*")
	if code != 0 {
		t.Fatalf("principal add: %s", errOut)
	}
	secret := regexp.MustCompile(`(?m)^secret: "([^"]+)"$`).FindStringSubmatch(out)[1]
	b, err := dialMoonBridge(t, addr, "island-c", "island-c", secret)
	if err != nil {
		t.Fatal(err)
	}
	s.waitLs(t, "island-c's handler", hasNode("island-c", "handlers", "mb:*"))
	answer := func(body ...byte) {
		f := b.next().(moonbridge.MessageFrame)
		frame := binary.BigEndian.AppendUint64([]byte{10}, uint64(f.OperationID)) // RESPONSE
		b.write(append(frame, body...), nil)
	}
	for _, c := range []struct {
		code byte // MoonBridge's error code
		exit int
		kind string
	}{
		{4, exitTimeout, "TIMEOUT"}, {6, exitRejected, "REJECTED"}, {1, exitNotConnected, "NOT_CONNECTED"},
		{8, exitProtocol, "PROTOCOL_ERROR"}, {7, exitHandler, "HANDLER_FAILED"}, {2, exitNoHandler, "NO_HANDLER"},
	} {
		reqOut, reqDone := s.background(t, "req", "island-c", "mb:anything", "q")
		answer(4, c.code, 0, 3, 'w', 'h', 'y') // error, code, "why"
		var exit *exec.ExitError
		if err := reqDone(); !errors.As(err, &exit) || exit.ExitCode() != c.exit || !strings.Contains(reqOut.String(), c.kind) {
			t.Errorf("backend error %d: busbar req %v, want exit %d %s:\n%s", c.code, err, c.exit, c.kind, reqOut)
		}
	}
	for _, c := range []struct {
		result byte // MoonBridge's send result
		want   string
	}{{6, "TIMED_OUT"}, {3, "NOT_CONNECTED"}, {7, "FAILED"}, {1, "ACCEPTED"}} {
		sendOut, sendDone := s.background(t, "send", "island-c", "mb:news", "e")
		answer(1, c.result) // send result
		if err := sendDone(); !strings.HasPrefix(sendOut.String(), c.want+" ") || (err == nil) != (c.want == "ACCEPTED") {
			t.Errorf("backend send result %d: busbar send %v:\n%s, want %s", c.result, err, sendOut, c.want)
		}
	}
}
