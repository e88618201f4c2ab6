package cli

// busbar serve's HTTP listener: the bus over WebSocket (and over TLS with
// --https), the browser client, a refused origin.

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"busbar/internal/testcert"
	"busbar/web"
)

// bannerURL returns the URL serve printed for scheme ("ws" or "wss").
func bannerURL(t *testing.T, s *server, scheme string) string {
	t.Helper()
	m := regexp.MustCompile(`busbar: listening on (` + scheme + `://\S+)`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("serve printed no %s URL:\n%s", scheme, s.banner)
	}
	return m[1]
}

func TestServeHTTPListener(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	wsURL := bannerURL(t, s, "ws")
	if !strings.HasPrefix(wsURL, "ws://127.0.0.1:") || !strings.HasSuffix(wsURL, "/bus") {
		t.Fatalf("ws URL %q", wsURL)
	}
	base := "http://" + strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws://"), "/bus")

	// The browser client, as a module a page on another port may import.
	resp, err := http.Get(base + web.ClientPath)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(js) != string(web.ClientJS()) || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("GET %s: %d %v (%d bytes)", web.ClientPath, resp.StatusCode, resp.Header, len(js))
	}
	if resp, err := http.Get(base + "/nothing"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("GET /nothing: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A page from a foreign origin is refused before any WebSocket.
	req, _ := http.NewRequest("GET", base+"/bus", nil)
	req.Header = http.Header{"Origin": {"http://evil.example"}, "Connection": {"Upgrade"}, "Upgrade": {"websocket"},
		"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign origin: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}

	// The client verbs reach the bus over it: a handler on the Unix
	// socket, a request over WebSocket.
	s.background(t, "reply", "math", "--exec", "tr a-z A-Z", "--name", "upper")
	s.waitLs(t, "handler", hasNode("upper", "handlers", "math"))
	code, out, errOut := s.busbar(t, "", "req", "upper", "math", "shout", "--server", wsURL)
	if code != 0 || out != "SHOUT" {
		t.Fatalf("req over %s: exit %d %q %s", wsURL, code, out, errOut)
	}
}

func TestServeHTTPSListener(t *testing.T) {
	cert, key, _ := testcert.Write(t)
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--https", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--http", "off")
	wssURL := bannerURL(t, s, "wss")
	if strings.Contains(s.banner, "ws://") {
		t.Fatalf("--http off still listens:\n%s", s.banner)
	}
	s.background(t, "reply", "math", "--exec", "tr a-z A-Z", "--name", "upper")
	s.waitLs(t, "handler", hasNode("upper", "handlers", "math"))
	// The certificate is the test's own: the CLI verifies against the
	// system roots, which SSL_CERT_FILE replaces.
	code, out, errOut := runEnv(t, []string{"BUSBAR_DATA=" + s.data, "SSL_CERT_FILE=" + cert}, "", "req", "upper", "math", "shout", "--server", wssURL)
	if code != 0 || out != "SHOUT" {
		t.Fatalf("req over %s: exit %d %q %s", wssURL, code, out, errOut)
	}
}

func TestServeHTTPSNeedsACertificate(t *testing.T) {
	code, _, errOut := run(t, "", "serve", "--data", filepath.Join(t.TempDir(), "d"), "--tcp", "off", "--https", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(errOut, "--https needs --tls-cert and --tls-key") {
		t.Fatalf("--https without a certificate: exit %d %s", code, errOut)
	}
}
