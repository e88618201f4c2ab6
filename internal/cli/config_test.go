package cli

// serve's configuration through the binary: the example file in contrib/,
// the order flags > file > environment > defaults, bad files refused, and
// the systemd unit checked by systemd-analyze where it exists.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"busbar/ops"
)

const exampleConfig = "../../contrib/busbar.toml"

func TestExampleConfigParsesAndPrintsBack(t *testing.T) {
	code, out, errOut := run(t, "", "serve", "--config", exampleConfig, "--print-config")
	if code != exitOK {
		t.Fatalf("the example config: exit %d: %s", code, errOut)
	}
	for _, want := range []string{`data = "/var/lib/busbar"`, `http = "127.0.0.1:7475"`, `relay-push-rate = 100.0`, `relay-push-burst = 1000`, `name = "broker"`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("--print-config lacks %s:\n%s", want, out)
		}
	}
	// What --print-config prints is a configuration --config takes back.
	again := filepath.Join(t.TempDir(), "printed.toml")
	if err := os.WriteFile(again, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out2, errOut := run(t, "", "serve", "--config", again, "--print-config")
	if code != exitOK || out2 != out {
		t.Fatalf("printed config read back: exit %d %s\n%s\nwant\n%s", code, errOut, out2, out)
	}
}

func TestConfigOrderIsFlagsFileEnvironmentDefaults(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "busbar.toml")
	if err := os.WriteFile(cfg, []byte("name = \"from-file\"\nhttp = \"127.0.0.1:1111\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"BUSBAR_SERVE_HTTP=127.0.0.1:2222", "BUSBAR_SERVE_TCP=127.0.0.1:3333", "BUSBAR_SERVE_NAME=from-env"}
	code, out, errOut := runEnv(t, env, "", "serve", "--config", cfg, "--name", "from-flag", "--print-config")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`name = "from-flag"`,      // flag over file and environment
		`http = "127.0.0.1:1111"`, // file over environment
		`tcp = "127.0.0.1:3333"`,  // environment over default
		`https = ""`, `unix = ""`, // defaults
		`log-level = "info"`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("lacks %s:\n%s", want, out)
		}
	}
}

func TestConfigRefusesWhatItDoesNotKnow(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"htpp = \"127.0.0.1:1\"\n", `unknown key "htpp"`},
		{"config = \"other.toml\"\n", `unknown key "config"`},
		{"relay-push-burst = \"many\"\n", "relay-push-burst"},
		{"[http]\naddr = \"x\"\n", "want a string, number or boolean"},
		{"name = \n", "busbar.toml"},
	} {
		cfg := filepath.Join(t.TempDir(), "busbar.toml")
		if err := os.WriteFile(cfg, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := run(t, "", "serve", "--config", cfg, "--print-config")
		if code != exitUsage || !strings.Contains(errOut, "configuration") || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d %q, want a usage error naming %s", c.file, code, errOut, c.want)
		}
	}
	code, _, errOut := runEnv(t, []string{"BUSBAR_SERVE_RELAY_PUSH_RATE=fast"}, "", "serve", "--print-config")
	if code != exitUsage || !strings.Contains(errOut, "$BUSBAR_SERVE_RELAY_PUSH_RATE") {
		t.Errorf("a bad environment value: exit %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", "serve", "--config", filepath.Join(t.TempDir(), "none.toml")); code != exitUsage || !strings.Contains(errOut, "none.toml") {
		t.Errorf("a missing file: exit %d %q", code, errOut)
	}
}

func TestServeRunsWithAConfigFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "busbar.toml")
	if err := os.WriteFile(cfg, []byte("name = \"configured\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--config", cfg)
	m := regexp.MustCompile(`busbar: dashboard at (\S+)/\?token=(\S+)`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("no dashboard URL:\n%s", s.banner)
	}
	code, js := httpGet(t, m[1]+ops.StatusPath, m[2])
	var st ops.Status
	if err := json.Unmarshal([]byte(js), &st); code != 200 || err != nil || st.Broker != "configured" {
		t.Fatalf("status: %d %v %+v", code, err, st)
	}
}

func TestSystemdUnitVerifies(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze here")
	}
	unit, err := os.ReadFile("../../contrib/busbar.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's binary exists: this test's build.
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/busbar", binPath)
	if text == string(unit) {
		t.Fatal("the unit does not start /usr/local/bin/busbar")
	}
	path := filepath.Join(t.TempDir(), "busbar.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// It warns of what it ignores (an unknown key, a bad value) and still
	// exits 0: any output is a failure.
	out, err := exec.Command(tool, "verify", path).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
