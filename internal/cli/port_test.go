package cli

// `busbar port serve`, `call` and `ls` through the built binary: a port
// backed by a shell script, exit statuses by rc band, and the same port
// reached through the broker with `busbar req`.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// portScript answers hi with its arguments, warns, fails with a shell's 1
// and with an rc of its own choosing.
const portScript = `case $BUSBAR_PORT_COMMAND in
hi) printf '{"hi":%s}' "$(cat)";;
plain) echo plain words;;
warn) echo '[1]'; echo careful >&2; exit 5;;
fail) echo 'no luck' >&2; exit 1;;
severe) echo 'very bad' >&2; exit 23;;
esac`

// portsDir points the binary (and this process) at a fresh, short ports
// directory.
func portsDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ports")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	dir := filepath.Join(d, "ports")
	t.Setenv("BUSBAR_PORTS", dir)
	return dir
}

func TestPortVerbs(t *testing.T) {
	dir := portsDir(t)
	s := &server{data: filepath.Join(t.TempDir(), "unused")} // no broker: a port needs none
	out, _ := s.background(t, "port", "serve", "notes", "--exec", portScript, "--version", "2.1",
		"--command", "hi=Say hi", "--command", "plain=Plain text", "--command", "warn=Warn", "--command", "fail=Fail", "--command", "severe=Fail badly")
	waitOutput(t, out, "port serve", "busbar: port notes listening on "+filepath.Join(dir, "notes.sock"))
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("ports directory: %v %v", fi.Mode(), err)
	}

	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		out   string
		err   string
	}{
		{"success", "", []string{"notes", "hi", `"ann"`}, 0, "{\"hi\":\"ann\"}\n", ""},
		{"arguments from stdin", `{"x":1}`, []string{"notes", "hi", "-"}, 0, "{\"hi\":{\"x\":1}}\n", ""},
		{"no arguments: null", "", []string{"notes", "hi"}, 0, "{\"hi\":null}\n", ""},
		{"stdout that is not JSON becomes a string", "", []string{"notes", "plain"}, 0, "\"plain words\"\n", ""},
		{"by path", "", []string{filepath.Join(dir, "notes.sock"), "hi", "1"}, 0, "{\"hi\":1}\n", ""},
		{"warning: exit 5, body kept", "", []string{"notes", "warn"}, 5, "[1]\n", "warning (rc 5): careful"},
		{"a shell's 1 is rc 10", "", []string{"notes", "fail"}, 10, "", "rc 10: no luck"},
		{"rc 23: exit 20, told apart", "", []string{"notes", "severe"}, 20, "", "rc 23: very bad (exit status 20, the floor of rc 23's band)\n"},
		{"unknown command", "", []string{"notes", "nope"}, 10, "", "Unknown command 'nope'. Available: fail, help, hi, info, plain, severe, warn"},
		{"help", "", []string{"notes", "help", `"hi"`}, 0, "{\"command\":\"hi\",\"description\":\"Say hi\"}\n", ""},
		{"info", "", []string{"notes", "info"}, 0, `"version":"2.1"`, ""},
		{"no such port", "", []string{"ghost", "hi"}, exitFail, "", `no port named "ghost"`},
		{"arguments not JSON", "", []string{"notes", "hi", "ann"}, exitUsage, "", "ARGS must be JSON"},
		{"bad name", "", []string{"No", "hi"}, exitUsage, "", "bad name"},
		{"usage", "", []string{"notes"}, exitUsage, "", "busbar port call: missing COMMAND\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runEnv(t, nil, c.stdin, append([]string{"port", "call"}, c.args...)...)
			if code != c.code || !strings.Contains(stdout, c.out) || !strings.Contains(stderr, c.err) {
				t.Fatalf("exit %d (want %d)\nstdout: %q\nstderr: %q", code, c.code, stdout, stderr)
			}
		})
	}

	code, stdout, stderr := runEnv(t, nil, "", "port", "ls")
	if code != 0 || !strings.Contains(stdout, "notes  busbar  notes  2.1") {
		t.Fatalf("ls: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := runEnv(t, nil, "", "port", "ls", "--json"); code != 0 || !strings.Contains(stdout, `"name":"notes"`) {
		t.Fatalf("ls --json: exit %d %s", code, stdout)
	}
	// A second port of the same name is refused while the first answers.
	if code, _, stderr := runEnv(t, nil, "", "port", "serve", "notes", "--exec", "true"); code != exitFail || !strings.Contains(stderr, "already served") {
		t.Fatalf("second serve: exit %d %s", code, stderr)
	}
}

func TestPortAnnouncedOnTheBus(t *testing.T) {
	portsDir(t)
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	out, _ := s.background(t, "port", "serve", "notes", "--exec", portScript, "--announce", "notes", "--name", "desk")
	waitOutput(t, out, "port serve", "answers on the bus as service notes, channel port:notes")
	code, stdout, stderr := s.busbar(t, "", "req", "notes", "port:notes", `{"command":"hi","args":"bus"}`)
	if code != 0 || stdout != `{"hi":"bus"}` {
		t.Fatalf("req: exit %d %q %s", code, stdout, stderr)
	}
	code, _, stderr = s.busbar(t, "", "req", "notes", "port:notes", `{"command":"fail"}`)
	if code != exitHandler || !strings.Contains(stderr, "no luck") {
		t.Fatalf("req fail: exit %d %s", code, stderr)
	}
	// The socket answers as well.
	if code, stdout, _ := runEnv(t, nil, "", "port", "call", "notes", "hi", "2"); code != 0 || stdout != "{\"hi\":2}\n" {
		t.Fatalf("call: exit %d %q", code, stdout)
	}
}
