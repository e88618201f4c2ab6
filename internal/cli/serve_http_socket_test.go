package cli

// busbar serve's HTTP endpoint on a Unix socket beside the bus's: owner
// only (mode 0600 in the 0700 data directory), and still behind the token.

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"busbar/ops"
)

func TestServeHTTPOnAUnixSocketIsOwnerOnlyAndAsksForTheToken(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data, "--http", "off") // the socket alone: no TCP port at all
	sock := filepath.Join(data, "busbar-http.sock")
	if !strings.Contains(s.banner, "busbar: HTTP on unix://"+sock) || strings.Contains(s.banner, "dashboard at") {
		t.Fatalf("banner:\n%s", s.banner)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the HTTP socket: %v %v, want a socket of mode 0600", fi, err)
	}
	token, _, err := ops.LoadToken(data)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	get := func(path, bearer string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://busbar"+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get(ops.HealthPath, ""); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	for _, p := range []string{ops.MetricsPath, ops.ReadyPath, ops.StatusPath, ops.DashboardPath, ops.LivePath} {
		if code, _ := get(p, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s on the socket without the token: %d, want 401", p, code)
		}
	}
	if code, body := get(ops.MetricsPath, token); code != 200 || !strings.Contains(body, "busbar_messages_in_total") {
		t.Fatalf("metrics with the token: %d %.300s", code, body)
	}

	// What the banner tells a person to run.
	out, err := exec.Command("curl", "-sS", "--unix-socket", sock, "-H", "Authorization: Bearer "+token, "http://busbar"+ops.ReadyPath).CombinedOutput()
	if err != nil && !isNotFound(err) {
		t.Fatalf("curl: %v %s", err, out)
	} else if err == nil && string(out) != "ready\n" {
		t.Fatalf("curl --unix-socket: %q", out)
	}

	// Another local user cannot even connect. Only root can act as one.
	if os.Geteuid() != 0 {
		t.Log("not root: another user's refusal is left to the file modes checked above")
		return
	}
	// Open the directories on the way to anyone: the socket's own mode
	// must refuse by itself (a 0700 data directory is a second wall).
	for d := data; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("curl", "-sS", "--unix-socket", sock, "-H", "Authorization: Bearer "+token, "http://busbar"+ops.ReadyPath)
	runAsUser(cmd, 65534)
	out, err = cmd.CombinedOutput()
	if isNotFound(err) {
		t.Skip("no curl")
	}
	if err == nil || strings.Contains(string(out), "ready") {
		t.Fatalf("user 65534 reached the socket: %v %q", err, out)
	}
}

func isNotFound(err error) bool {
	var ee *exec.Error
	return errors.As(err, &ee)
}

func TestHTTPSocketPathIsBesideTheBusSocketAndFitsASocket(t *testing.T) {
	for _, c := range []struct{ flag, unix, dir, want string }{
		{"", "", "/data", "/data/busbar-http.sock"},
		{"", "off", "/data", "/data/busbar-http.sock"},
		{"", "/run/b1.sock", "/data", "/run/b1-http.sock"},
		{"/elsewhere/h.sock", "/run/b1.sock", "/data", "/elsewhere/h.sock"},
		{"off", "", "/data", "off"},
	} {
		if got, note := httpSocketPath(c.flag, c.unix, c.dir); got != c.want || note != "" {
			t.Errorf("httpSocketPath(%q, %q, %q) = %q %q, want %q", c.flag, c.unix, c.dir, got, note, c.want)
		}
	}
	// At the longest socket path, and one byte past it.
	fits := "/" + strings.Repeat("a", maxSocketPath-len("/-http.sock")) + ".sock"
	if got, note := httpSocketPath("", fits, "/data"); len(got) != maxSocketPath || note != "" {
		t.Errorf("a %d-byte path: %q %q", maxSocketPath, got, note)
	}
	if got, note := httpSocketPath("", "/a"+fits[1:], "/data"); got != "off" || !strings.Contains(note, "--http-unix") {
		t.Errorf("a %d-byte path: %q %q, want off with a note", maxSocketPath+1, got, note)
	}
}
