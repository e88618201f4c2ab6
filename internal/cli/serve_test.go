package cli

// `busbar serve` as a child process, end to end: messaging, credentials,
// discovery and state through the binary.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"busbar/auth"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// server is a `busbar serve` child process on a fresh data directory.
type server struct {
	cmd    *exec.Cmd
	data   string
	stdout syncBuffer // every line serve printed, the listeners' included
	stderr syncBuffer
	exited chan error
	once   sync.Once
	banner string // what serve printed up to its tcp line
}

// serveStartDeadline is how long startServe waits for serve's banner
// before it calls the start failed: far past what a start takes even on a
// busy CI machine, since it only bounds a failure.
const serveStartDeadline = time.Minute

func startServe(t *testing.T, data string, args ...string) *server {
	t.Helper()
	return startServeUnder(t, nil, data, args...)
}

// startServeUnder is startServe with serve run by wrapper, a command
// line that execs its last arguments (a shell that sets a limit first).
func startServeUnder(t *testing.T, wrapper []string, data string, args ...string) *server {
	t.Helper()
	s := &server{data: data, exited: make(chan error, 1)}
	argv := append(append(wrapper, binPath, "serve", "--data", data, "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-level", "warn"), args...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stderr = &s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			fmt.Fprintln(&s.stdout, sc.Text())
			if strings.HasPrefix(sc.Text(), "busbar: listening on tcp://") {
				ready <- strings.Join(lines, "\n")
			}
		}
		_, _ = io.Copy(io.Discard, out)
		s.exited <- s.cmd.Wait()
	}()
	select {
	case banner := <-ready:
		t.Logf("serve:\n%s", banner)
		s.banner = banner
	case <-time.After(serveStartDeadline):
		_ = s.cmd.Process.Kill()
		t.Fatalf("serve did not start; stderr:\n%s", s.stderr.String())
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// kill ends the server with SIGKILL, as a crash would.
func (s *server) kill(t *testing.T) {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not die on SIGKILL")
		}
	})
}

// stop sends SIGTERM and expects a clean exit.
func (s *server) stop(t *testing.T) {
	s.once.Do(func() { s.terminate(t) })
}

func (s *server) terminate(t *testing.T) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("serve exited with %v; stderr:\n%s", err, s.stderr.String())
		}
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("serve did not stop on SIGTERM")
	}
}

// busbar runs a client verb against the server with no flags but the
// environment a user of the same OS account has.
func (s *server) busbar(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runEnv(t, []string{"BUSBAR_DATA=" + s.data}, stdin, args...)
}

// runEnv runs the binary with env added to this process's environment.
func runEnv(t *testing.T, env []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// background starts a long-running verb and returns its stdout buffer and
// a wait function.
func (s *server) background(t *testing.T, args ...string) (*syncBuffer, func() error) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
	out := &syncBuffer{}
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return out, func() error {
		select {
		case err := <-done:
			done <- err
			return err
		case <-time.After(10 * time.Second):
			return errors.New("still running")
		}
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLs polls `busbar ls --json` until cond holds.
func (s *server) waitLs(t *testing.T, what string, cond func(nodes []map[string]any) bool) {
	t.Helper()
	testbroker.AwaitEvery(t, 10*time.Second, 50*time.Millisecond, what, func() error {
		code, out, errOut := s.busbar(t, "", "ls", "--json")
		var nodes []map[string]any
		if code == 0 && json.Unmarshal([]byte(out), &nodes) == nil && cond(nodes) {
			return nil
		}
		return fmt.Errorf("ls exit %d: %s %s", code, out, errOut)
	})
}

func hasNode(name, field, channel string) func([]map[string]any) bool {
	return func(nodes []map[string]any) bool {
		for _, n := range nodes {
			if n["node"] != name {
				continue
			}
			list, _ := n[field].([]any)
			for _, c := range list {
				if c == channel {
					return true
				}
			}
		}
		return false
	}
}

func TestServeEndToEnd(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)

	// First start created working credentials, private to this OS user.
	for path, want := range map[string]os.FileMode{
		data: 0o700, filepath.Join(data, "principals.json"): 0o600,
		filepath.Join(data, "credentials.json"): 0o600, filepath.Join(data, "busbar.sock"): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v mode %v, want %04o", path, err, fi.Mode().Perm(), want)
		}
	}

	subOut, subWait := s.background(t, "sub", "news", "--count", "1", "--json", "--name", "watcher")
	s.background(t, "reply", "math", "--exec", "tr a-z A-Z", "--name", "upper")
	s.background(t, "reply", "fail", "--exec", "echo nope >&2; exit 3", "--name", "failer")
	s.background(t, "reply", "slow", "--exec", "sleep 5", "--name", "sleeper")
	s.waitLs(t, "subscriber", hasNode("watcher", "subscriptions", "news"))
	s.waitLs(t, "handlers", func(n []map[string]any) bool {
		return hasNode("upper", "handlers", "math")(n) && hasNode("failer", "handlers", "fail")(n) && hasNode("sleeper", "handlers", "slow")(n)
	})

	code, out, errOut := s.busbar(t, "", "pub", "news", "hello", "--name", "publisher")
	if code != 0 || !strings.Contains(out, "watcher ACCEPTED\n") || !strings.Contains(out, "broker NO_SUBSCRIBER\n") || strings.Contains(out, "publisher") {
		t.Fatalf("pub: exit %d\n%s%s", code, out, errOut)
	}
	if err := subWait(); err != nil {
		t.Fatalf("sub: %v: %s", err, subOut.String())
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(subOut.String()), &got); err != nil || got["payload"] != "hello" || got["from"] != "publisher.bus" || got["kind"] != "EVENT" {
		t.Fatalf("sub printed %q (%v)", subOut.String(), err)
	}

	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		out   string
		err   string
	}{
		{"reply", "", []string{"req", "upper", "math", "shout"}, 0, "SHOUT", ""},
		{"payload from stdin", "quiet", []string{"req", "upper", "math", "-"}, 0, "QUIET", ""},
		{"handler failure", "", []string{"req", "failer", "fail", "x"}, exitHandler, "", "nope"},
		{"no handler", "", []string{"req", "upper", "nothing", "x"}, exitNoHandler, "", "NO_HANDLER"},
		{"not connected", "", []string{"req", "ghost", "math", "x"}, exitNoHandler, "", "not connected"},
		{"timeout", "", []string{"req", "sleeper", "slow", "x", "--timeout", "300ms"}, exitTimeout, "", "TIMEOUT"},
		{"reserved channel: bad input", "", []string{"req", "upper", "bus.x", "x"}, exitUsage, "", "invalid channel name"},
		{"send", "", []string{"send", "upper", "math", "x"}, exitFail, "NO_SUBSCRIBER", ""},
		{"send not connected", "", []string{"send", "ghost", "math", "x"}, exitFail, "NOT_CONNECTED", ""},
		{"usage", "", []string{"req", "upper"}, exitUsage, "", "busbar req: missing CHANNEL\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := s.busbar(t, c.stdin, c.args...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.err) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, c.code, out, errOut)
			}
		})
	}
	code, out, _ = s.busbar(t, "", "ls")
	if code != 0 || !strings.HasPrefix(out, "NODE") || !strings.Contains(out, "upper") {
		t.Fatalf("ls: %d\n%s", code, out)
	}

	// A second start on the same data directory keeps the credentials.
	s.stop(t)
	before, _ := os.ReadFile(filepath.Join(data, "credentials.json"))
	s2 := startServe(t, data)
	after, _ := os.ReadFile(filepath.Join(data, "credentials.json"))
	if !bytes.Equal(before, after) {
		t.Fatal("restart replaced the credentials")
	}
	if code, _, errOut := s2.busbar(t, "", "ls"); code != 0 {
		t.Fatalf("ls after restart: %s", errOut)
	}
}

func TestServeRefusesWrongCredentials(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"principal":"local","secret":"wrong"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := s.busbar(t, "", "ls", "--credentials", bad)
	if code != exitFail || !strings.Contains(errOut, "authentication refused") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The client may exit before the broker's log line is written.
	testbroker.Eventually(t, 10*time.Second, "the broker logs the refusal", func() bool {
		return strings.Contains(s.stderr.String(), "authentication refused")
	})
}

// TestServeWithPrincipalsElsewhere: given --principals (say, one file the
// brokers of a bus share), serve bootstraps nothing in its data directory,
// so no credentials file appears that it would refuse; clients present a
// credential of the given file.
func TestServeWithPrincipalsElsewhere(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	if _, err := auth.Bootstrap(shared); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data, "--principals", filepath.Join(shared, auth.PrincipalsFile))
	for _, f := range []string{auth.PrincipalsFile, auth.CredentialsFile} {
		if _, err := os.Stat(filepath.Join(data, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s in the data directory: %v, want none", f, err)
		}
	}
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data directory: %v %v, want mode 0700", fi, err)
	}
	if code, out, errOut := s.busbar(t, "", "ls", "--credentials", filepath.Join(shared, auth.CredentialsFile)); code != 0 {
		t.Fatalf("ls with the shared credential: exit %d: %s %s", code, out, errOut)
	}
}

// TestServeDiscovery drives discovery through the binary: two replies
// announce one service name (a collision), ls shows and watches the
// registry, and requests by bare name and by address behave as documented.
func TestServeDiscovery(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	watchOut, _ := s.background(t, "ls", "--watch", "--json", "--name", "watch")
	s.waitLs(t, "the watcher", func(n []map[string]any) bool { return len(n) > 0 && hasAny(n, "watch") })
	s.background(t, "reply", "math", "--exec", "tr a-z A-Z", "--name", "upper1", "--service", "shout", "--version", "1.0")
	waitServices := func(what string, cond func([]wire.ServiceInfo) bool) {
		t.Helper()
		testbroker.AwaitEvery(t, 10*time.Second, 50*time.Millisecond, what, func() error {
			code, out, errOut := s.busbar(t, "", "ls", "--services", "--json")
			var list []wire.ServiceInfo
			if code == 0 && json.Unmarshal([]byte(out), &list) == nil && cond(list) {
				return nil
			}
			return fmt.Errorf("exit %d: %s %s", code, out, errOut)
		})
	}
	waitServices("one instance", func(l []wire.ServiceInfo) bool { return len(l) == 1 && l[0].Address == "shout.upper1.bus" })
	if code, out, errOut := s.busbar(t, "", "req", "shout", "math", "one"); code != 0 || strings.TrimSpace(out) != "ONE" {
		t.Fatalf("bare service: exit %d %q %s", code, out, errOut)
	}
	s.background(t, "reply", "math", "--echo", "--name", "upper2", "--service", "shout")
	waitServices("a collision", func(l []wire.ServiceInfo) bool { return len(l) == 2 && l[0].Collision && l[1].Collision })
	if code, _, errOut := s.busbar(t, "", "req", "shout", "math", "two"); code != exitRejected || !strings.Contains(errOut, "AMBIGUOUS") {
		t.Fatalf("ambiguous: exit %d %s", code, errOut)
	}
	if code, out, _ := s.busbar(t, "", "req", "shout.upper2.bus", "math", "two"); code != 0 || strings.TrimSpace(out) != "two" {
		t.Fatalf("by address: exit %d %q", code, out)
	}
	code, out, _ := s.busbar(t, "", "ls", "--services")
	if code != 0 || !strings.HasPrefix(out, "SERVICE") || !strings.Contains(out, "shout.upper1.bus") || !strings.Contains(out, "true") {
		t.Fatalf("ls --services: %d\n%s", code, out)
	}
	testbroker.Eventually(t, 10*time.Second, "the watch to print the collision", func() bool {
		return strings.Contains(watchOut.String(), `"op":"collision"`) && strings.Contains(watchOut.String(), `"address":"shout.upper2.bus"`)
	})
}

func hasAny(nodes []map[string]any, name string) bool {
	for _, n := range nodes {
		if n["node"] == name {
			return true
		}
	}
	return false
}

// TestServeState drives `busbar state` against a serve child, and checks
// that a restart on the same data directory keeps every namespace.
func TestServeState(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data)
	entry := func(out string) map[string]any {
		t.Helper()
		var e map[string]any
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatalf("not an entry: %q", out)
		}
		return e
	}
	watchOut, _ := s.background(t, "state", "watch", "home", "--name", "watcher")
	s.waitLs(t, "the watcher", func(n []map[string]any) bool { return hasAny(n, "watcher") })
	code, out, errOut := s.busbar(t, "", "state", "set", "home", "target", "20.5", "--name", "thermostat")
	if e := entry(out); code != 0 || e["v"] != 20.5 || e["src"] != "thermostat" {
		t.Fatalf("set: %d %q %s", code, out, errOut)
	}
	if code, out, _ := s.busbar(t, "", "state", "set", "home", "mode", "eco mode", "--string", "--name", "thermostat"); code != 0 || entry(out)["v"] != "eco mode" {
		t.Fatalf("a non-JSON value is a string: %d %q", code, out)
	}
	if code, _, errOut := s.busbar(t, "", "state", "set", "home", "target", "23", "--name", "phone"); code != exitRejected || !strings.Contains(errOut, "belongs to thermostat") {
		t.Fatalf("foreign write: %d %s", code, errOut)
	}
	if code, out, _ := s.busbar(t, "", "state", "open", "home", "target", "--name", "thermostat"); code != 0 || entry(out)["open"] != true {
		t.Fatalf("open: %d %q", code, out)
	}
	if code, out, _ := s.busbar(t, "", "state", "set", "home", "target", "22", "--name", "phone"); code != 0 || entry(out)["src"] != "phone" {
		t.Fatalf("write to an open key: %d %q", code, out)
	}
	if code, out, _ := s.busbar(t, "", "state", "del", "home", "mode", "--name", "thermostat"); code != 0 || entry(out)["del"] != true {
		t.Fatalf("del: %d %q", code, out)
	}
	if code, _, errOut := s.busbar(t, "", "state", "get", "home", "nothing"); code != exitFail || !strings.Contains(errOut, "no key") {
		t.Fatalf("get of a missing key: %d %s", code, errOut)
	}
	if code, _, _ := s.busbar(t, "", "state", "frobnicate"); code != exitUsage {
		t.Fatalf("unknown op: %d", code)
	}
	testbroker.Eventually(t, 10*time.Second, "the watch to print every change", func() bool {
		return strings.Count(watchOut.String(), "\n") == 5 && strings.Contains(watchOut.String(), `"del":true`)
	})
	_, before, _ := s.busbar(t, "", "state", "dump")

	s.stop(t)
	s2 := startServe(t, data)
	code, after, errOut := s2.busbar(t, "", "state", "dump")
	if code != 0 || after != before || !strings.Contains(after, `"owner":"thermostat"`) {
		t.Fatalf("after a restart:\n%s\nbefore:\n%s\n%s", after, before, errOut)
	}
}

// TestServeStatePermissions: a principal that may read only cfg.* is
// refused other namespaces with REJECTED (exit 7) and a reason, and its
// dump holds only what it may read; a "local" entry written before the
// state lists keeps every namespace, and serve says so.
func TestServeStatePermissions(t *testing.T) {
	data := filepath.Join(t.TempDir(), "perm")
	startServe(t, data).stop(t) // bootstrap "local"

	// Rewrite the principals file: "local" as an earlier release wrote it
	// (no state lists) and a restricted "cfgreader".
	principalsPath := filepath.Join(data, auth.PrincipalsFile)
	raw, err := os.ReadFile(principalsPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Principals []map[string]any `json:"principals"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	perms := file.Principals[0]["permissions"].(map[string]any)
	delete(perms, "state_read")
	delete(perms, "state_write")
	delete(perms, "state_admin")
	secret, hash, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	file.Principals = append(file.Principals, map[string]any{
		"name": "cfgreader", "secret_hash": hash, "nodes": []string{"*"},
		"permissions": map[string]any{"state_read": []string{"cfg.*"}},
	})
	raw, _ = json.Marshal(file)
	if err := os.WriteFile(principalsPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "cfgreader.json")
	raw, _ = json.Marshal(auth.Credential{Principal: "cfgreader", Secret: secret})
	if err := os.WriteFile(creds, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	s := startServe(t, data)
	if log := s.stderr.String(); !strings.Contains(log, "default state permissions") || !strings.Contains(log, `principal \"local\"`) {
		t.Errorf("serve did not report the default it gave local:\n%s", log)
	}
	for _, ns := range []string{"cfg.app", "billing"} {
		if code, out, errOut := s.busbar(t, "", "state", "set", ns, "k", "1", "--name", "owner"); code != 0 {
			t.Fatalf("legacy local writes %s: %d %s %s", ns, code, out, errOut)
		}
	}
	reader := func(args ...string) (int, string, string) {
		return s.busbar(t, "", append(append([]string{"state"}, args...), "--credentials", creds, "--name", "rd")...)
	}
	if code, out, errOut := reader("get", "cfg.app", "k"); code != 0 || !strings.Contains(out, `"v":1`) {
		t.Fatalf("permitted get: %d %q %s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "billing", "k"}, "REJECTED (rc 10 in the reply; exit status 7): not permitted to state-read namespace billing"},
		{[]string{"dump", "billing"}, "not permitted to state-read namespace billing"},
		{[]string{"watch", "billing"}, "not permitted to state-read namespace billing"},
		{[]string{"set", "cfg.app", "k", "2"}, "not permitted to state-write namespace cfg.app"},
		{[]string{"open", "cfg.app", "k"}, "not permitted to state-admin namespace cfg.app"},
	} {
		if code, _, errOut := reader(tc.args...); code != exitRejected || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", tc.args, code, errOut, exitRejected, tc.want)
		}
	}
	code, out, errOut := reader("dump")
	var all []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &all) != nil || len(all) != 1 || all[0]["ns"] != "cfg.app" {
		t.Fatalf("dump by a cfg.* reader: %d %q %s", code, out, errOut)
	}
}

// TestServeRefusesAnEmptyStateStore: an existing state.db of 0 bytes is
// not a new store: serve says why it does not start, and exits 1.
func TestServeRefusesAnEmptyStateStore(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(data, "state.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "", "serve", "--data", data, "--tcp", "off", "--http", "off")
	if code != exitFail || !strings.Contains(errOut, "busbar serve: cannot start the broker: broker: state store "+db+" cannot be trusted: the file is empty") ||
		!strings.Contains(errOut, "move the file aside") {
		t.Fatalf("serve over an empty state.db: %d\n%s", code, errOut)
	}
	if fi, err := os.Stat(db); err != nil || fi.Size() != 0 {
		t.Fatalf("state.db after the refusal: %v %v", fi, err)
	}
}
