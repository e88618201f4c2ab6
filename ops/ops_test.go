package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/ops"
	"busbar/wire"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// opsServer serves the operator's endpoints of e's broker on a real
// loopback socket.
func opsServer(t *testing.T, e *testbroker.Env, dataDir string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	ops.Register(mux, ops.Options{Broker: e.Broker, Token: testToken, DataDir: dataDir})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// get requests path with auth ("" for none: "Bearer X" or "?token=X" in
// the path) and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path, authorization string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func TestEndpointsRefuseRequestsWithoutTheToken(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, t.TempDir())
	for _, p := range []string{ops.MetricsPath, ops.ReadyPath, ops.StatusPath, ops.DashboardPath} {
		for _, a := range []struct{ path, auth string }{
			{p, ""},
			{p, "Bearer wrong"},
			{p, "Bearer " + testToken[:len(testToken)-1]},
			{p, "Basic " + testToken},
			{p, "Bearer" + testToken},
			{p + "?token=wrong", ""},
		} {
			code, body, h := get(t, srv, a.path, a.auth)
			if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" || strings.Contains(body, "busbar_") {
				t.Errorf("GET %s with %q: %d %q, want 401 with a WWW-Authenticate", a.path, a.auth, code, body)
			}
		}
		// The scheme is case-insensitive (RFC 9110, section 11.1).
		for _, scheme := range []string{"Bearer ", "bearer ", "BEARER  "} {
			if code, body, _ := get(t, srv, p, scheme+testToken); code != http.StatusOK {
				t.Errorf("GET %s with %q and the token: %d %s", p, scheme, code, body)
			}
		}
		if code, body, h := get(t, srv, p+"?token="+testToken, ""); code != http.StatusOK || h.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s?token=: %d %v %s", p, code, h, body)
		}
	}
	// Liveness is for anyone who can reach the port: it says nothing.
	if code, body, _ := get(t, srv, ops.HealthPath, ""); code != http.StatusOK || body != "ok\n" {
		t.Errorf("GET %s: %d %q", ops.HealthPath, code, body)
	}
}

// metric returns the value of the sample named by series (name{labels})
// in a text exposition, or "" when it is absent.
func metric(exposition, series string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(exposition)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestMetricsReadTheBrokersCountersAtScrape(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{RelayDir: filepath.Join(t.TempDir(), "relay")})
	srv := opsServer(t, e, "")
	scrape := func() string {
		code, body, h := get(t, srv, ops.MetricsPath, "Bearer "+testToken)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
			t.Fatalf("scrape: %d %v", code, h)
		}
		return body
	}
	before := scrape()
	for series, want := range map[string]string{
		"busbar_nodes": "0", "busbar_ready": "1", "busbar_refused_total": "0",
		`busbar_dropped_total{reason="queue_full"}`: "0", `busbar_dropped_total{reason="peer_refused"}`: "0",
		`busbar_relay_refused_total{code="inbox_full"}`: "0",
		"busbar_relay_inbox_blobs_count":                "0", "busbar_relay_fsync_batch_pushes_count": "0",
		`busbar_messages_in_total{kind="stream"}`: "0", "busbar_routing_latency_seconds_count": "0",
	} {
		if got := metric(before, series); got != want {
			t.Errorf("%s = %q before any traffic, want %s", series, got, want)
		}
	}
	if !strings.Contains(before, "# TYPE busbar_refused_total counter") || !strings.Contains(before, "# TYPE busbar_nodes gauge") ||
		!strings.Contains(before, "go_goroutines") {
		t.Errorf("exposition lacks TYPE lines or the Go collector:\n%s", before)
	}

	alpha := testclient.Connect(t, e, "alpha")
	if _, err := testclient.DialClient(e, "intruder", func(o *client.Options) { o.Credential = auth.Credential{Principal: "local", Secret: "wrong"} }); err == nil {
		t.Fatal("a wrong secret connected")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	owner := testclient.Connect(t, e, "owner")
	if _, err := owner.State("inventory").Set(ctx, "widgets", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.Tap(ctx, wire.TapRequest{}); err != nil {
		t.Fatal(err)
	}
	// The refused connection is served until its last frame is written:
	// the connections settle at 2 a moment after the client heard AUTH.
	testbroker.Await(t, 5*time.Second, "the figures after the traffic", func() error {
		after := scrape()
		for series, want := range map[string]string{
			"busbar_nodes": "2", "busbar_connections": "2", "busbar_refused_total": "1",
			"busbar_state_namespaces": "1", "busbar_state_keys": "1", "busbar_tappers": "1", "busbar_tap_missed_total": "0",
		} {
			if got := metric(after, series); got != want {
				return fmt.Errorf("%s = %q, want %s", series, got, want)
			}
		}
		return nil
	})
}

func TestReadyzIsNotReadyWhenTheDataDirectoryCannotBeWritten(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	srv := opsServer(t, e, data)
	if code, body, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken); code != 200 || body != "ready\n" {
		t.Fatalf("readyz: %d %q", code, body)
	}
	if left, _ := os.ReadDir(data); len(left) != 0 {
		t.Fatalf("the probe left %v behind", left)
	}
	// The directory gone (an unmounted disk): whatever the user, nothing
	// can be written in it.
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	code, body, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "data directory cannot be written") {
		t.Fatalf("readyz with no data directory: %d %q", code, body)
	}
	_, js, _ := get(t, srv, ops.StatusPath, "Bearer "+testToken)
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil || st.Ready || !strings.Contains(st.NotReady, "data directory") {
		t.Fatalf("status: %v %+v", err, st)
	}
}

func TestReadyzIsNotReadyOnceShutdownBegins(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, "")
	if code, _, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken); code != 200 {
		t.Fatalf("readyz before shutdown: %d", code)
	}
	if err := e.Broker.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken); code != http.StatusServiceUnavailable || !strings.Contains(body, "closed") {
		t.Fatalf("readyz after shutdown: %d %q", code, body)
	}
	if code, body, _ := get(t, srv, ops.HealthPath, ""); code != 200 {
		t.Fatalf("healthz after shutdown: %d %q (alive until the process ends)", code, body)
	}
	if got := metric(func() string { _, b, _ := get(t, srv, ops.MetricsPath, "Bearer "+testToken); return b }(), "busbar_ready"); got != "0" {
		t.Fatalf("busbar_ready after shutdown = %q", got)
	}
}

func TestStatusListsNodesNamespacesAndCounters(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{})
	srv := opsServer(t, e, "")
	c := testclient.Connect(t, e, "alpha")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Scope("p").Channel("orders.new").Subscribe(ctx, func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State("cfg").Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	code, js, _ := get(t, srv, ops.StatusPath, "Bearer "+testToken)
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); code != 200 || err != nil {
		t.Fatalf("status: %d %v\n%s", code, err, js)
	}
	if st.Broker != e.Broker.Name() || !st.Ready || st.Connections != 1 || len(st.Nodes) != 1 || st.Nodes[0].Node != "alpha" ||
		!strings.Contains(strings.Join(st.Nodes[0].Subscriptions, ","), "orders.new") {
		t.Fatalf("status: %+v", st)
	}
	if len(st.Namespaces) != 1 || st.Namespaces[0] != (broker.NamespaceInfo{Name: "cfg", Owner: "alpha", Keys: 1, Seq: st.Namespaces[0].Seq}) || st.Namespaces[0].Seq == 0 {
		t.Fatalf("namespaces: %+v", st.Namespaces)
	}
	if _, ok := st.Counters["refused"]; !ok || len(st.Dropped) != len(broker.DropReasons()) {
		t.Fatalf("counters %v, dropped %v", st.Counters, st.Dropped)
	}
}

func TestLoadTokenCreatesAPrivateFileOnceAndRefusesAShortOne(t *testing.T) {
	dir := t.TempDir()
	tok, created, err := ops.LoadToken(dir)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("first load: %q %v %v", tok, created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, ops.TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi, err)
	}
	again, created, err := ops.LoadToken(dir)
	if err != nil || created || again != tok {
		t.Fatalf("second load: %q %v %v, want the same token", again, created, err)
	}
	// At the edge: 32 characters are taken, 31 are not.
	for _, c := range []struct {
		tok string
		ok  bool
	}{{strings.Repeat("a", 32), true}, {strings.Repeat("a", 31), false}} {
		if err := os.WriteFile(filepath.Join(dir, ops.TokenFile), []byte(c.tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		got, _, err := ops.LoadToken(dir)
		if c.ok && (err != nil || got != c.tok) || !c.ok && err == nil {
			t.Errorf("a %d-character token: %q %v", len(c.tok), got, err)
		}
	}
}

// TestMetricsCountRequestsPerGroupMember: busbar_group_requests_total
// counts the requests the broker sent each member of a service group
// through the bare name, one series per live member; the status lists
// the group with its members, the same counts, and each service's group.
func TestMetricsCountRequestsPerGroupMember(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{})
	srv := opsServer(t, e, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, node := range []string{"w1", "w2"} {
		w := testclient.Connect(t, e, node)
		if _, err := w.Scope("s").Channel("work").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Announce(ctx, wire.Announcement{Service: "echoer", Group: "pool", Channels: []string{"work"}}); err != nil {
			t.Fatal(err)
		}
	}
	caller := testclient.Connect(t, e, "caller")
	for range 4 {
		if _, err := caller.Scope("c").Channel("work").Request(ctx, "echoer", nil); err != nil {
			t.Fatal(err)
		}
	}
	_, body, _ := get(t, srv, ops.MetricsPath, "Bearer "+testToken)
	for _, node := range []string{"w1", "w2"} {
		series := `busbar_group_requests_total{group="pool",node="` + node + `",service="echoer"}`
		if got := metric(body, series); got != "2" {
			t.Errorf("%s = %q, want 2", series, got)
		}
	}
	// A service outside any group is no group's; and the counts outlive
	// the buffers the requests were read into.
	if _, err := caller.Announce(ctx, wire.Announcement{Service: "alone", Channels: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	_, js, _ := get(t, srv, ops.StatusPath, "Bearer "+testToken)
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	want := []ops.GroupStatus{{Service: "echoer", Group: "pool", Members: []ops.GroupMemberStatus{{Node: "w1", Broker: "broker", Requests: 2}, {Node: "w2", Broker: "broker", Requests: 2}}}}
	if fmt.Sprint(st.Groups) != fmt.Sprint(want) {
		t.Fatalf("status groups: %+v, want %+v", st.Groups, want)
	}
	for _, sv := range st.Services {
		if (sv.Service == "echoer") != (sv.Group == "pool") {
			t.Fatalf("status service %s in group %q", sv.Service, sv.Group)
		}
	}
	var raw struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := json.Unmarshal([]byte(js), &raw); err != nil || len(raw.Groups) != 1 || fmt.Sprint(raw.Groups[0]["members"]) != "[map[broker:broker node:w1 requests:2] map[broker:broker node:w2 requests:2]]" {
		t.Fatalf("status JSON's groups: %v %v", raw.Groups, err)
	}
}

// ReloadPath answers with the file reloaded, 422 with the reason when it
// was refused, 401 without the token, and is not served (only GET and
// POST of the others) when the broker gives no reload.
func TestReloadPathReportsTheFileOrWhyItWasRefused(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	var refuse error
	mux := http.NewServeMux()
	ops.Register(mux, ops.Options{Broker: e.Broker, Token: testToken,
		ReloadPrincipals: func() (string, error) { return "/data/principals.json", refuse }})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func(auth string) (int, ops.ReloadResult) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ops.ReloadPath, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res ops.ReloadResult
		_ = json.NewDecoder(resp.Body).Decode(&res)
		return resp.StatusCode, res
	}
	if code, res := post("Bearer " + testToken); code != http.StatusOK || res.File != "/data/principals.json" || res.Error != "" {
		t.Errorf("reload: %d %+v", code, res)
	}
	refuse = errors.New("auth: bad JSON")
	if code, res := post("Bearer " + testToken); code != http.StatusUnprocessableEntity || res.Error != "auth: bad JSON" {
		t.Errorf("refused reload: %d %+v", code, res)
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d", code)
	}
	if code, _, _ := get(t, srv, ops.ReloadPath, "Bearer "+testToken); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", code)
	}
	plain := opsServer(t, e, "")
	req, _ := http.NewRequest(http.MethodPost, plain.URL+ops.ReloadPath, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := plain.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("reload served without ReloadPrincipals")
	}
}
