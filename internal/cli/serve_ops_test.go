package cli

// busbar serve's operator endpoints through the binary: the printed URL,
// the token file, the metrics a scraper reads with it.

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"busbar/ops"
)

func httpGet(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestServePrintsATokenURLAndServesMetricsWithTheToken(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	m := regexp.MustCompile(`busbar: dashboard at (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]+)\n`).FindStringSubmatch(s.banner + "\n")
	if m == nil {
		t.Fatalf("serve printed no dashboard URL:\n%s", s.banner)
	}
	base, token := m[1], m[2]
	statusURL := base + ops.StatusPath + "?token=" + token
	fi, err := os.Stat(filepath.Join(s.data, ops.TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi, err)
	}
	file, _ := os.ReadFile(filepath.Join(s.data, ops.TokenFile))
	if strings.TrimSpace(string(file)) != token {
		t.Fatalf("the URL's token is not the file's")
	}

	s.background(t, "reply", "math", "--exec", "tr a-z A-Z", "--name", "upper")
	s.waitLs(t, "handler", hasNode("upper", "handlers", "math"))

	// What a person opens, and what it reads.
	if code, page := httpGet(t, base+"/?token="+token, ""); code != 200 || !strings.Contains(page, "<title>busbar</title>") {
		t.Fatalf("GET the printed URL: %d %.200s", code, page)
	}
	code, js := httpGet(t, statusURL, "")
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); code != 200 || err != nil {
		t.Fatalf("GET the printed URL: %d %v\n%s", code, err, js)
	}
	if !st.Ready || len(st.Nodes) != 1 || st.Nodes[0].Node != "upper" || st.Relay == nil {
		t.Fatalf("status: %+v", st)
	}
	// What Prometheus does with the file as its bearer token.
	code, text := httpGet(t, base+ops.MetricsPath, strings.TrimSpace(string(file)))
	if code != 200 || !regexp.MustCompile(`(?m)^busbar_nodes 1$`).MatchString(text) || !strings.Contains(text, "busbar_relay_fsyncs_total") {
		t.Fatalf("metrics with the token: %d\n%s", code, text)
	}
	for _, p := range []string{ops.MetricsPath, ops.StatusPath, ops.ReadyPath, ops.DashboardPath} {
		if code, _ := httpGet(t, base+p, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", p, code)
		}
	}
	if code, _ := httpGet(t, base+ops.HealthPath, ""); code != 200 {
		t.Errorf("healthz: %d", code)
	}

	// A restart keeps the token: a scraper's file stays valid.
	s.stop(t)
	s2 := startServe(t, s.data)
	if !strings.Contains(s2.banner, "?token="+token) {
		t.Fatalf("the restarted broker printed another token:\n%s", s2.banner)
	}
}
