package cli

// The busbar command: frame parsing and validation, addresses, usage, and
// the built binary driven as a user would (TestMain builds it).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"busbar/internal/leakcheck"
	"busbar/wire"
)

// binPath is the busbar binary TestMain builds for the end-to-end tests.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "busbar-cli-test")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "busbar")
	if out, err := exec.Command("go", "build", "-o", binPath, "busbar/cmd/busbar").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := leakcheck.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

const seedFrame = "---\ncommand: noded.ping\nfrom: probe\nid: 1\nto: noded\ntype: request\n---\n{\"detail\":true}\n"

func TestFrameParse(t *testing.T) {
	cases := []struct {
		name, in string
		args     []string
		code     int
		want     string // exact stdout
		errHas   string
	}{
		{"clean", seedFrame, nil, 0,
			`{"headers":{"command":"noded.ping","from":"probe","id":"1","to":"noded","type":"request"},"body":"{\"detail\":true}","report":[]}` + "\n", ""},
		{"clean strict", seedFrame, []string{"--strict"}, 0,
			`{"headers":{"command":"noded.ping","from":"probe","id":"1","to":"noded","type":"request"},"body":"{\"detail\":true}","report":[]}` + "\n", ""},
		{"heartbeat", "---\n---\n", []string{"--lenient"}, 0, `{"headers":{},"body":"","report":[]}` + "\n", ""},
		{"defects lenient", "---\n x: 1\ntype: event\n---\nhi", []string{"--lenient"}, 0,
			`{"headers":{"type":"event"},"body":"hi","report":["line 2: header line starts with whitespace: \" x: 1\""]}` + "\n", ""},
		{"defects default is lenient", "---\nbad\n---\n", nil, 0,
			`{"headers":{},"body":"","report":["line 2: header line has no \": \" separator: \"bad\""]}` + "\n", ""},
		{"defect strict", "---\nbad\n---\n", []string{"--strict"}, 1, "", "line 2"},
		{"value defect kept", "---\nargs: {\ntype: event\n---\n", nil, 0,
			`{"headers":{"args":"{","type":"event"},"body":"","report":["line 2: header value looks like JSON but is not valid JSON: \"args: {\" (kept, raw)"]}` + "\n", ""},
		{"value defect strict", "---\nargs: {\n---\n", []string{"--strict"}, 1, "", "not valid JSON"},
		{"not a frame", "hello", nil, 1, "", "does not start"},
		{"both modes", seedFrame, []string{"--strict", "--lenient"}, 2, "", "exclude"},
		{"unknown flag", seedFrame, []string{"--nope"}, 2, "", "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, c.in, append([]string{"frame", "parse"}, c.args...)...)
			if code != c.code || out != c.want || !strings.Contains(errOut, c.errHas) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
			}
		})
	}
}

func TestFrameParseTooLarge(t *testing.T) {
	in := "---\n---\n" + strings.Repeat("x", wire.MaxMessageBytes-7)
	code, _, errOut := run(t, in, "frame", "parse")
	if code != 1 || !strings.Contains(errOut, "too large") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestFrameValidate(t *testing.T) {
	code, out, _ := run(t, seedFrame, "frame", "validate")
	if code != 0 || out != "" {
		t.Fatalf("clean frame: exit %d, %q", code, out)
	}
	code, out, _ = run(t, "---\nrc: 300\ntype: notify\nx-trace: 1\nbad\n---\n", "frame", "validate")
	want := "parse: line 5: header line has no \": \" separator: \"bad\"\n" +
		"rc: \"300\" is not a number from 0 to 255\n" +
		"type: \"notify\" is not a message type (want one of [request response event stream])\n" +
		"x-trace: unknown header\n"
	if code != 1 || out != want {
		t.Fatalf("exit %d, stdout:\n%s", code, out)
	}
	if code, _, errOut := run(t, "nope", "frame", "validate"); code != 2 || errOut == "" {
		t.Fatalf("not a frame: exit %d", code)
	}
}

func TestAddr(t *testing.T) {
	cases := []struct {
		in   string
		code int
		want map[string]any
	}{
		{"noded.alpha", 0, map[string]any{"sub": "", "service": "noded", "node": "alpha", "display": "noded.alpha.bus"}},
		{"alpha.bus", 0, map[string]any{"sub": "", "service": "", "node": "alpha", "display": "alpha.bus"}},
		{"x.noded.alpha", 0, map[string]any{"sub": "x", "service": "noded", "node": "alpha", "display": "x.noded.alpha.bus"}},
		{"noded", 0, map[string]any{"sub": "", "service": "noded", "node": "", "display": "noded"}},
		{"noded.alpha@mesh.example.com", 0, map[string]any{"cross_mesh": true, "local": "noded.alpha.bus", "mesh": "mesh.example.com"}},
		{"Noded.alpha", 2, nil},
		{"a.b.c.d", 2, nil},
	}
	for _, c := range cases {
		code, out, errOut := run(t, "", "addr", c.in)
		if code != c.code {
			t.Fatalf("addr %s: exit %d, stderr %q", c.in, code, errOut)
		}
		if c.want == nil {
			if out != "" || errOut == "" {
				t.Fatalf("addr %s: stdout %q stderr %q", c.in, out, errOut)
			}
			continue
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(c.want)
		if string(gb) != string(wb) {
			t.Fatalf("addr %s = %s, want %s", c.in, gb, wb)
		}
	}
	if code, _, _ := run(t, "", "addr"); code != 2 {
		t.Fatal("addr without argument")
	}
}

func TestUsage(t *testing.T) {
	if code, _, errOut := run(t, ""); code != 2 || !strings.Contains(errOut, "usage") {
		t.Fatal("no arguments")
	}
	if code, _, errOut := run(t, "", "bogus"); code != 2 || !strings.Contains(errOut, "bogus") {
		t.Fatal("unknown verb")
	}
	if code, out, _ := run(t, "", "help"); code != 0 || !strings.Contains(out, "frame") {
		t.Fatal("help")
	}
	if code, out, _ := run(t, "", "version"); code != 0 || !strings.HasPrefix(out, "busbar ") || !strings.Contains(out, "\nprotocol "+wire.ProtocolVersion+" ") {
		t.Fatalf("version: %q", out)
	}
}

// TestBinary drives the built binary as a user would.
func TestBinary(t *testing.T) {
	cmd := exec.Command(binPath, "frame", "parse", "--strict")
	cmd.Stdin = strings.NewReader(seedFrame)
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"command":"noded.ping"`) {
		t.Fatalf("frame parse: %v %s", err, out)
	}
	cmd = exec.Command(binPath, "addr", "NOPE")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || stderr.Len() == 0 {
		t.Fatalf("addr NOPE: %v, stderr %q", err, stderr.String())
	}
	cmd = exec.Command(binPath, "frame", "validate")
	cmd.Stdin = strings.NewReader("---\nx: 1\n---\n")
	out, err = cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || string(out) != "x: unknown header\n" {
		t.Fatalf("frame validate: %v %q", err, out)
	}
	if out, err := exec.Command(binPath, "version").Output(); err != nil || !strings.HasPrefix(string(out), "busbar ") {
		t.Fatalf("version: %v %q", err, out)
	}
	t.Run("docs/cli.md", func(t *testing.T) { testDocExamples(t, filepath.Dir(binPath)) })
}

// testDocExamples runs every "$ command" line in docs/cli.md's sh blocks
// with the built binary first on PATH and compares the combined output with
// the lines that follow it.
func testDocExamples(t *testing.T, binDir string) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	type example struct{ cmd, want string }
	var examples []example
	inBlock := false
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case line == "```sh":
			inBlock = true
		case line == "```":
			inBlock = false
		case inBlock && strings.HasPrefix(line, "$ "):
			examples = append(examples, example{cmd: line[2:]})
		case inBlock && len(examples) > 0:
			examples[len(examples)-1].want += line + "\n"
		}
	}
	if len(examples) < 5 {
		t.Fatalf("found only %d examples", len(examples))
	}
	for _, ex := range examples {
		cmd := exec.Command("bash", "-c", ex.cmd)
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, _ := cmd.CombinedOutput()
		if string(out) != ex.want {
			t.Errorf("$ %s\ngot:\n%swant:\n%s", ex.cmd, out, ex.want)
		}
	}
}
