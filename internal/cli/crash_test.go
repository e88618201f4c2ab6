package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/durable"
	"busbar/internal/testbroker"
)

// proc is a busbar child process that the test stops or kills itself.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error // receives Wait's result, once
	err  error
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binPath, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	return p
}

// wait waits for the process to exit and returns Wait's error.
func (p *proc) wait() error {
	if p.done != nil {
		p.err = <-p.done
		p.done = nil
	}
	return p.err
}

// stop ends it with SIGTERM, as a user's ^C.
func (p *proc) stop() error {
	if p.done != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	return p.wait()
}

// exited reports whether the process has exited, without waiting.
func (p *proc) exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case p.err = <-p.done:
		p.done = nil
		return true
	default:
		return false
	}
}

// kill ends it with SIGKILL: a crash.
func (p *proc) kill() {
	if p.done != nil {
		_ = p.cmd.Process.Kill()
	}
	_ = p.wait()
}

// pairedDevices starts `busbar serve` and makes two devices of group
// "home" through the real binary: the laptop creates and invites, the
// phone joins, both listen until the phone holds the manifest.
func pairedDevices(t *testing.T) (s *server, env []string, laptop, phone string) {
	t.Helper()
	s = startServe(t, filepath.Join(t.TempDir(), "state"))
	laptop, phone = filepath.Join(t.TempDir(), "laptop"), filepath.Join(t.TempDir(), "phone")
	env = []string{"BUSBAR_DATA=" + s.data}
	if code, _, errOut := busbar(t, env, "group", "create", "home", "--device", laptop); code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	_, tok, _ := busbar(t, env, "group", "invite", "home", "--device", laptop)
	if code, _, errOut := busbar(t, env, "group", "join", strings.TrimSpace(tok), "--device", phone); code != 0 {
		t.Fatalf("join: %d %s", code, errOut)
	}
	atLaptop := startProc(t, env, "durable", "listen", "home", "--device", laptop)
	atPhone := startProc(t, env, "durable", "listen", "home", "--device", phone)
	testbroker.Eventually(t, 20*time.Second, "the phone holds the group's manifest", func() bool {
		code, out, _ := busbar(t, env, "group", "show", "home", "--device", phone, "--json")
		var v groupView
		return code == 0 && json.Unmarshal([]byte(out), &v) == nil && v.Epoch == 2 && v.Member
	})
	for _, p := range []*proc{atLaptop, atPhone} {
		if err := p.stop(); err != nil {
			t.Fatalf("listen: %v\n%s", err, p.out)
		}
	}
	return s, env, laptop, phone
}

type deviceStatus struct{ Outbox, Held int }

func status(t *testing.T, env []string, dev string) deviceStatus {
	t.Helper()
	code, out, errOut := busbar(t, env, "durable", "status", "--device", dev, "--json")
	var st deviceStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status %s: exit %d %q %q", dev, code, out, errOut)
	}
	return st
}

// Each crash point of the contract with real processes: the process is
// armed with BUSBAR_FAILPOINT, exits with status 86 at the point, and the
// next process of the device (run without it) brings the outcome the seed
// gives for that point. The laptop sends; the phone's listen runs a
// handler that appends each body, one a line, to a file.
func TestCrashPointsWithRealProcesses(t *testing.T) {
	_, env, laptop, phone := pairedDevices(t)
	file := filepath.Join(t.TempDir(), "handled")
	handler := "cat >> '" + file + "' && echo >> '" + file + "'"
	crash := func(point string, args ...string) string {
		t.Helper()
		code, out, errOut := busbar(t, append(env, durable.EnvFailpoint+"="+point), args...)
		if code != durable.FailpointExit || !strings.Contains(errOut, "failpoint "+point) {
			t.Fatalf("%s at %s: exit %d, %q %q", args, point, code, out, errOut)
		}
		return out
	}
	send := func(body string) {
		t.Helper()
		if code, _, errOut := busbar(t, env, "durable", "send", "home", body, "--device", laptop); code != 0 {
			t.Fatalf("send %q: exit %d %q", body, code, errOut)
		}
	}
	listen := func(n int) {
		t.Helper()
		if code, _, errOut := busbar(t, env, "durable", "listen", "home", "--device", phone, "--exec", handler, "--count", strconv.Itoa(n)); code != 0 {
			t.Fatalf("listen: exit %d %q", code, errOut)
		}
	}
	var want []string
	handled := func(more ...string) {
		t.Helper()
		want = append(want, more...)
		b, _ := os.ReadFile(file)
		if got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"); !slices.Equal(got, want) {
			t.Fatalf("handled %q, want %q", got, want)
		}
	}
	outbox := func(dev string, n int) {
		t.Helper()
		if st := status(t, env, dev); st.Outbox != n || st.Held != 0 {
			t.Fatalf("%s: outbox %d held %d, want outbox %d", dev, st.Outbox, st.Held, n)
		}
	}

	// Sender, before the outbox write: not sent, no id printed.
	if out := crash(durable.FailSenderBeforeOutbox, "durable", "send", "home", "lost", "--device", laptop); out != "" {
		t.Fatalf("printed %q", out)
	}
	outbox(laptop, 0)
	// Sender, after the outbox write: no id printed, but queued; the next
	// send pushes it first. "lost" never comes: it would come before it.
	if out := crash(durable.FailSenderAfterOutbox, "durable", "send", "home", "kept", "--device", laptop); out != "" {
		t.Fatalf("printed %q", out)
	}
	outbox(laptop, 1)
	send("after kept")
	listen(2)
	handled("kept", "after kept")
	// Sender, after the relay stored the blob, before the push ack: the
	// next send pushes it again, and the phone's dedup drops the copy
	// (it comes before "after pushed", which ends the listen).
	if out := crash(durable.FailSenderAfterPush, "durable", "send", "home", "pushed", "--device", laptop); len(strings.TrimSpace(out)) != 32 {
		t.Fatalf("printed %q, want the id", out)
	}
	outbox(laptop, 1)
	send("after pushed")
	listen(2)
	handled("pushed", "after pushed")
	// Recipient, before the dedup write: the handler runs again after the
	// restart, the only duplicate an app sees.
	send("twice")
	crash(durable.FailRecipientBeforeDedup, "durable", "listen", "home", "--device", phone, "--exec", handler)
	handled("twice")
	listen(1)
	handled("twice")
	// Recipient, between the dedup write and the ack: the blob comes
	// again, is recognised and acked, and the handler does not run.
	send("once")
	crash(durable.FailRecipientBeforeAck, "durable", "listen", "home", "--device", phone, "--exec", handler)
	handled("once")
	send("after once")
	listen(1)
	handled("after once")
	outbox(laptop, 0)
	outbox(phone, 0)
}

// A name that is not a crash point is refused before anything is done.
func TestUnknownFailpointRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	code, _, errOut := busbar(t, []string{durable.EnvFailpoint + "=sender-after-lunch"}, "id", "init", "--device", dir)
	if code != exitFail || !strings.Contains(errOut, "not a crash point") {
		t.Fatalf("exit %d %q", code, errOut)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the device was made: %v", err)
	}
}
