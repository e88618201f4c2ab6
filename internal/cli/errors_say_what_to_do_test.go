package cli

// Errors that say what to do, through the binary and a real broker: one
// line on stderr, the way out named, bad input exit 2 in every verb.

import (
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

// oneLine fails unless s is exactly one line containing every want.
func oneLine(t *testing.T, what, s string, want ...string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("%s: want one line on stderr, got %q", what, s)
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s: stderr %q lacks %q", what, s, w)
		}
	}
}

func TestNoBrokerSaysStartOne(t *testing.T) {
	data := filepath.Join(t.TempDir(), "never")
	code, out, errOut := runEnv(t, []string{"BUSBAR_DATA=" + data}, "", "pub", "news", "hi")
	if code != exitFail || out != "" {
		t.Errorf("no broker ever: exit %d, stdout %q", code, out)
	}
	oneLine(t, "no broker ever", errOut, "busbar pub: no broker has run with data directory "+data, "start one with `busbar serve`")

	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	s.stop(t)
	code, out, errOut = s.busbar(t, "", "req", "someone", "math", "x")
	if code != exitFail || out != "" {
		t.Errorf("broker stopped: exit %d, stdout %q", code, out)
	}
	oneLine(t, "broker stopped", errOut, "busbar req: no broker is listening at unix://"+s.data, "start one with `busbar serve`")

	code, _, errOut = s.busbar(t, "", "ls", "--server", "tcp://127.0.0.1:1,tcp://127.0.0.1:2")
	if code != exitFail {
		t.Errorf("no broker at a list: exit %d", code)
	}
	oneLine(t, "no broker at a list", errOut, "no broker is listening at any of tcp://127.0.0.1:1,tcp://127.0.0.1:2")
}

func TestSecondServeOnADataDirectoryInUse(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	start := time.Now()
	code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", s.data, "--tcp", "off", "--unix", filepath.Join(t.TempDir(), "other.sock"))
	if code != exitFail {
		t.Errorf("second serve: exit %d", code)
	}
	oneLine(t, "second serve", errOut, "busbar serve: another broker is using "+s.data, "--data DIR")
	t.Logf("refused in %v", time.Since(start))
	// The first broker still serves.
	if code, _, errOut := s.busbar(t, "", "ls"); code != 0 {
		t.Fatalf("ls after the refused second serve: exit %d %s", code, errOut)
	}
}

func TestServeOnAPortInUseNamesTheWayOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, errOut := runEnv(t, nil, "", "serve", "--http", "off", "--data", filepath.Join(t.TempDir(), "d"), "--tcp", ln.Addr().String())
	if code != exitFail {
		t.Errorf("exit %d", code)
	}
	oneLine(t, "port in use", errOut, "tcp://"+ln.Addr().String()+" is in use", "--tcp 127.0.0.1:0", "--tcp off")
}

// TestAPeerThatIsNotABroker: a NATS server's first bytes ("INFO {") read
// as a 1.2 GB length prefix; the CLI says what the peer is not.
func TestAPeerThatIsNotABroker(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("INFO {\"server_id\":\"x\",\"version\":\"2.15.2\"}\r\n"))
		buf := make([]byte, 512)
		_, _ = c.Read(buf) // until the client gives up and closes
	}()
	defer func() { ln.Close(); <-accepted }()
	code, out, errOut := s.busbar(t, "", "pub", "news", "hi", "--server", "tcp://"+ln.Addr().String())
	if code != exitFail || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	oneLine(t, "not a broker", errOut, "tcp://"+ln.Addr().String()+" is not a busbar broker")
	if strings.Contains(errOut, "too large") {
		t.Errorf("the frame-size error leaks: %q", errOut)
	}
}

func TestBadInputExitsTwoInEveryVerb(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	verbs := [][]string{
		{"pub", "news", "x"}, {"sub", "news"}, {"send", "node", "news", "x"}, {"req", "node", "news", "x"},
		{"reply", "news", "--echo"}, {"ls"}, {"ls", "--watch"}, {"state", "get", "ns", "k"}, {"state", "watch", "ns"},
	}
	for _, v := range verbs {
		for _, bad := range [][]string{{"--server", "bogus://x"}, {"--name", "Bad Name"}} {
			code, out, errOut := s.busbar(t, "", append(append([]string(nil), v...), bad...)...)
			if code != exitUsage || out != "" {
				t.Errorf("%q %q: exit %d, stdout %q", v, bad, code, out)
			}
			oneLine(t, strings.Join(append(v, bad...), " "), errOut, "invalid")
		}
	}
	for _, v := range [][]string{{"pub", "bad channel", "x"}, {"sub", "Bad:name"}, {"send", "node", "bus.x", "x"},
		{"req", "node", "a:b:c", "x"}, {"reply", "bad channel", "--echo"}, {"req", "Not.A.Node", "news", "x"}} {
		code, out, errOut := s.busbar(t, "", v...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, stdout %q", v, code, out)
		}
		oneLine(t, strings.Join(v, " "), errOut, "invalid")
	}
}

func TestPayloadOverTheLimitNamesItsSize(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	for _, n := range []int{2_000_000, 20_000_000} { // over the broker's limit; over the largest frame
		code, out, errOut := s.busbar(t, strings.Repeat("x", n), "pub", "news", "-")
		if code != exitUsage || out != "" {
			t.Errorf("%d bytes: exit %d, stdout %q", n, code, out)
		}
		oneLine(t, "payload", errOut, " "+strconv.Itoa(n)+" bytes")
	}
}

func TestRefusalsKeepTheirStatusAndLabelTheRC(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	code, out, errOut := s.busbar(t, "", "req", "ghost", "math", "x")
	if code != exitNoHandler || out != "" {
		t.Errorf("req ghost: exit %d, stdout %q", code, out)
	}
	oneLine(t, "req ghost", errOut, "NO_HANDLER (rc 20 in the reply; exit status 3)")
	// A receipt is output, on stdout, even when it says no.
	code, out, errOut = s.busbar(t, "", "send", "ghost", "math", "x")
	if code != exitFail || !strings.HasPrefix(out, "NOT_CONNECTED id=") || errOut != "" {
		t.Errorf("send ghost: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestReqEndsWithANewlineOnATerminal runs req under script(1), which gives
// it a terminal; through a pipe the reply's bytes stay as they are.
func TestReqEndsWithANewlineOnATerminal(t *testing.T) {
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) is not installed")
	}
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	s.background(t, "reply", "math", "--exec", "printf SHOUT", "--name", "upper")
	s.waitLs(t, "handler", hasNode("upper", "handlers", "math"))
	if _, out, _ := s.busbar(t, "", "req", "upper", "math", "x"); out != "SHOUT" {
		t.Errorf("through a pipe: %q", out)
	}
	cmd := exec.Command(scriptCmd, "-qec", binPath+" req upper math x", "/dev/null")
	cmd.Env = append(cmd.Environ(), "BUSBAR_DATA="+s.data)
	out, err := cmd.Output()
	if err != nil || string(out) != "SHOUT\r\n" {
		t.Errorf("on a terminal: %v %q", err, out)
	}
}

func TestBrokerLogsNodeConnectsAtDebug(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		s := startServe(t, filepath.Join(t.TempDir(), "d"), "--log-level", level)
		if code, _, errOut := s.busbar(t, "", "ls", "--name", "visitor"); code != 0 {
			t.Fatalf("ls: exit %d %s", code, errOut)
		}
		s.stop(t)
		logged := strings.Contains(s.stderr.String(), `msg="node connected" node=visitor`) &&
			strings.Contains(s.stderr.String(), `msg="node disconnected" node=visitor`)
		if logged != (level == "debug") {
			t.Errorf("--log-level %s: connect logged %v:\n%s", level, logged, s.stderr.String())
		}
	}
}

// snakeCase is the one convention of every --json output's field names.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys collects every object key in v, at any depth.
func jsonKeys(v any, keys map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			keys[k] = true
			jsonKeys(e, keys)
		}
	case []any:
		for _, e := range v {
			jsonKeys(e, keys)
		}
	}
}

func TestJSONOutputsUseSnakeCase(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	s.background(t, "reply", "math", "--echo", "--name", "upper", "--service", "calc", "--version", "1")
	s.waitLs(t, "handler", hasNode("upper", "handlers", "math"))
	testbroker.Await(t, 10*time.Second, "the service", func() error {
		_, out, _ := s.busbar(t, "", "ls", "--services")
		if !strings.Contains(out, "calc") {
			return errString("not listed yet")
		}
		return nil
	})
	dev := filepath.Join(t.TempDir(), "dev")
	runs := [][]string{
		{"ls", "--json"}, {"ls", "--services", "--json"}, {"state", "set", "home", "t", "1"}, {"state", "dump"},
		{"bench", "req", "--msgs", "20", "--json"}, {"addr", "noded.alpha@mesh.example.com"},
		{"id", "init", "--device", dev}, {"id", "show", "--json", "--device", dev}, {"durable", "status", "--json", "--device", dev},
	}
	for _, args := range runs {
		code, out, errOut := s.busbar(t, "", args...)
		if code != 0 {
			t.Fatalf("%q: exit %d %s", args, code, errOut)
		}
		keys := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var v any
			if json.Unmarshal([]byte(line), &v) == nil {
				jsonKeys(v, keys)
			}
		}
		for k := range keys {
			if !snakeCase.MatchString(k) {
				t.Errorf("%q prints the field %q, not snake_case:\n%s", args, k, out)
			}
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// A client of another OS user (no credentials of its own) pointed at a
// broker's TCP address is told how to get credentials, not a file error.
func TestRemoteServerWithoutCredentialsSaysHowToGetThem(t *testing.T) {
	data := t.TempDir() // another HOME: no broker ever ran here
	code, out, errOut := runEnv(t, []string{"BUSBAR_DATA=" + data, "BUSBAR_CREDENTIALS="}, "", "pub", "news", "hi", "--server", "tcp://127.0.0.1:1")
	if code != exitFail || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	oneLine(t, "no credentials", errOut, "tcp://127.0.0.1:1 needs credentials", filepath.Join(data, "credentials.json"),
		"busbar principal add NAME --out FILE", "--credentials FILE")
	if strings.Contains(errOut, "no such file") {
		t.Errorf("the file error leaks: %q", errOut)
	}
}

// req in NATS's order (SUBJECT PAYLOAD) is bad input, answered with
// busbar's order and the user's own channel and payload in it; nothing is
// sent.
func TestReqInNATSOrderSpellsOutBusbarsOrder(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	code, out, errOut := s.busbar(t, "", "req", "upper", "hello, bus")
	if code != exitUsage || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	oneLine(t, "nats order", errOut, `invalid channel name "hello, bus"`, "busbar req takes TARGET CHANNEL [PAYLOAD]",
		"busbar req TARGET upper 'hello, bus'", "busbar ls")
	// Three arguments with a bad channel: only the order is named.
	code, _, errOut = s.busbar(t, "", "req", "someone", "bad channel", "x")
	if code != exitUsage {
		t.Errorf("bad channel: exit %d", code)
	}
	oneLine(t, "bad channel", errOut, "busbar req takes TARGET CHANNEL [PAYLOAD]")
}
