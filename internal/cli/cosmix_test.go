package cli

// serve --cosmix through the binary: a cosmix client's frames over a real
// WebSocket, a busbar verb calling the cosmix service, and the flag's
// refusal of an address other machines could reach.

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/auth"
	"busbar/internal/testbroker"
)

func TestServeCosmixServesACosmixAppAndBusbarVerbsCallIt(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data, "--cosmix", "127.0.0.1:0")
	var url string
	re := regexp.MustCompile(`cosmix apps connect to (ws://\S+/ws)\?token=PRINCIPAL:SECRET`)
	testbroker.Eventually(t, 10*time.Second, "serve to print the cosmix URL", func() bool {
		m := re.FindStringSubmatch(s.stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	cred, err := auth.LoadCredential(filepath.Join(data, auth.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url+"?token="+cred.Principal+":"+cred.Secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	send := func(frame string) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() string {
		t.Helper()
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	send("---\ncommand: noded.register\nfrom: service-b\nid: 1\nto: noded\ntype: request\n---\n{\"version\":\"0.3.0\"}\n")
	if got, want := recv(), "---\ncommand: noded.register\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{\"registered\": \"service-b\"}\n"; got != want {
		t.Fatalf("register: %q, want %q", got, want)
	}
	code, out, errOut := s.busbar(t, "", "ls", "--services")
	if code != 0 || !strings.Contains(out, "service-b") || !strings.Contains(out, "0.3.0") {
		t.Fatalf("ls --services: exit %d\n%s%s", code, out, errOut)
	}

	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := s.busbar(t, "", "req", "service-b", "cosmix:call", `{"command":"greet","args":{"name":"ann"}}`)
		done <- result{code, out, errOut}
	}()
	call := recv()
	id := regexp.MustCompile(`(?m)^id: (\S+)$`).FindStringSubmatch(call)
	if !strings.Contains(call, "command: greet\n") || !strings.HasSuffix(call, "---\n{\"name\":\"ann\"}\n") || id == nil {
		t.Fatalf("the app got %q", call)
	}
	send("---\ncommand: greet\nfrom: service-b\nid: " + id[1] + "\nrc: 0\ntype: response\n---\n{\"greeting\":\"hello ann\"}\n")
	if r := <-done; r.code != 0 || strings.TrimSpace(r.out) != `{"greeting":"hello ann"}` {
		t.Fatalf("busbar req: exit %d %q %s", r.code, r.out, r.err)
	}
}

func TestServeCosmixRefusesAnAddressOffLoopback(t *testing.T) {
	code, _, errOut := runEnv(t, nil, "", "serve", "--data", filepath.Join(t.TempDir(), "state"), "--tcp", "127.0.0.1:0", "--http", "off", "--cosmix", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "loopback") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// serve's cosmix door stands behind the broker's: a refused upgrade is a
// line of its refusal log (stderr) and a count on /metrics by door and
// reason.
func TestServeCosmixRefusalsAreLoggedAndCountedOnMetrics(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--cosmix", "127.0.0.1:0")
	m := regexp.MustCompile(`busbar: dashboard at (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]+)`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("no dashboard URL:\n%s", s.banner)
	}
	base, token := m[1], m[2]
	var url string
	re := regexp.MustCompile(`cosmix apps connect to (ws://\S+/ws)\?token=PRINCIPAL:SECRET`)
	testbroker.Eventually(t, 10*time.Second, "serve to print the cosmix URL", func() bool {
		m := re.FindStringSubmatch(s.stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url+"?token=local:wrong", nil)
	if err == nil {
		_ = ws.CloseNow()
		t.Fatal("a wrong token was upgraded")
	}
	if resp == nil || resp.StatusCode != 401 {
		t.Fatalf("a wrong token: %v %v", resp, err)
	}
	if n := metric(t, base, token, `busbar_cosmix_refused_total\{door="cosmix",reason="bad_token"\}`); n != 1 {
		t.Fatalf("%d bad tokens counted, want 1", n)
	}
	testbroker.Eventually(t, 10*time.Second, "the refusal on stderr", func() bool {
		return strings.Contains(s.stderr.String(), "cosmix: refused an upgrade: no credential, or one that does not log in")
	})
}
