package cli

// busbar status through the binary: the owner asks with nothing but the
// data directory; the exit status follows readiness.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

func statusJSON(t *testing.T, out string) statusSummary {
	t.Helper()
	var st statusSummary
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v: %q", err, out)
	}
	return st
}

func TestStatusShowsTheBrokerAndItsConnections(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	code, out, errOut := s.busbar(t, "", "status")
	if code != exitOK || errOut != "" {
		t.Fatalf("status: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"broker ", "ready", "version ", "protocol 1", "uptime ", "connections ", "queued ", "drops ", "none", "relay "} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	_, _ = s.background(t, "sub", "news")
	testbroker.Await(t, 30*time.Second, "the subscriber in the status", func() error {
		code, out, _ := s.busbar(t, "", "status", "--json")
		st := statusJSON(t, out)
		if code != exitOK || !st.Ready || st.Protocol != "1" || st.Connections < 1 || st.Nodes < 1 {
			return fmt.Errorf("exit %d, %+v", code, st)
		}
		return nil
	})
}

func TestStatusExitsOneWhenTheBrokerIsNotReady(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	page := regexp.MustCompile(`dashboard at (http://[^/]+)/`).FindStringSubmatch(s.banner)
	if page == nil {
		t.Fatalf("no dashboard URL in the banner:\n%s", s.banner)
	}
	tok := filepath.Join(t.TempDir(), "token")
	b, err := os.ReadFile(filepath.Join(s.data, "http-token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// The data directory gone from its path (an unmounted disk): the
	// broker cannot write there, so it is not ready.
	moved := s.data + ".moved"
	if err := os.Rename(s.data, moved); err != nil {
		t.Fatal(err)
	}
	code, out, _ := s.busbar(t, "", "status", "--http", page[1], "--token-file", tok)
	if code != exitFail || !strings.Contains(out, "NOT READY") || !strings.Contains(out, "data directory cannot be written") {
		t.Errorf("not ready: exit %d:\n%s", code, out)
	}
	code, out, _ = s.busbar(t, "", "status", "--json", "--http", page[1], "--token-file", tok)
	if st := statusJSON(t, out); code != exitFail || st.Ready || st.NotReady == "" {
		t.Errorf("not ready --json: exit %d, %+v", code, st)
	}
	if err := os.Rename(moved, s.data); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := s.busbar(t, "", "status", "--http", page[1], "--token-file", tok); code != exitOK {
		t.Errorf("ready again: exit %d", code)
	}

	if err := os.WriteFile(tok, []byte(strings.Repeat("0", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := s.busbar(t, "", "status", "--http", page[1], "--token-file", tok)
	if code != exitFail {
		t.Errorf("wrong token: exit %d", code)
	}
	oneLine(t, "wrong token", errOut, "refused the token")
}

func TestStatusWithoutABrokerSaysStartOne(t *testing.T) {
	data := filepath.Join(t.TempDir(), "never")
	code, out, errOut := runEnv(t, []string{"BUSBAR_DATA=" + data}, "", "status")
	if code != exitFail || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	oneLine(t, "no broker", errOut, "no broker has run with data directory "+data, "busbar serve")

	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	s.stop(t)
	code, _, errOut = s.busbar(t, "", "status")
	if code != exitFail {
		t.Errorf("stopped: exit %d", code)
	}
	oneLine(t, "stopped", errOut, "no broker is listening at unix://", "busbar serve")
	code, _, errOut = s.busbar(t, "", "status", "--http", "ftp://x", "--token-file", filepath.Join(s.data, "http-token"))
	if code != exitUsage {
		t.Errorf("bad --http: exit %d (%q)", code, errOut)
	}
	// The local token is never sent to another address.
	code, _, errOut = s.busbar(t, "", "status", "--http", "http://127.0.0.1:1")
	if code != exitUsage || !strings.Contains(errOut, "--http needs --token-file") {
		t.Errorf("--http without --token-file: exit %d (%q)", code, errOut)
	}
}

// The status API's per-channel counts are exact: known traffic through
// the binary, from short-lived connections (whose first message a
// sampled count would multiply), reads back as sent.
func TestStatusChannelCountsMatchTheTrafficSent(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	s.busbar(t, "", "pub", "telemetry.temp", "21")
	for range 5 {
		s.busbar(t, "", "pub", "orders.new", "x")
	}
	_, _ = s.background(t, "reply", "upper", "--echo", "--name", "up")
	s.waitLs(t, "the replier", hasNode("up", "handlers", "upper"))
	for range 3 {
		if code, _, errOut := s.busbar(t, "", "req", "up", "upper", "hi"); code != 0 {
			t.Fatalf("req: %d %s", code, errOut)
		}
	}
	tok, err := os.ReadFile(filepath.Join(s.data, "http-token"))
	if err != nil {
		t.Fatal(err)
	}
	// Each request and its response count on the channel: 3 + 3.
	want := map[string]int64{"telemetry.temp": 1, "orders.new": 5, "upper": 6}
	testbroker.Await(t, 30*time.Second, "the counts", func() error {
		st, err := fetchStatus(t.Context(), localHTTP(s.data), strings.TrimSpace(string(tok)), nil)
		if err != nil {
			return err
		}
		for ch, n := range want {
			if st.Traffic.Channels[ch] != n {
				return fmt.Errorf("channels %v, want %v", st.Traffic.Channels, want)
			}
		}
		return nil
	})
}
