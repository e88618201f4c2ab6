package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/durable"
	"busbar/internal/testbroker"
)

// `busbar durable listen` as the device's long-running process, with real
// processes: it outlives its broker, pushes what was queued while the
// broker was down as soon as it is back, reports delivery events as they
// happen, and gives way, saying so, to a newer listener of its device.

// exitCode is a finished process's exit status (0 for a nil error).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// sendDurable runs `durable send` of dev and returns the message id.
func sendDurable(t *testing.T, env []string, dev, body string) (id, stderr string) {
	t.Helper()
	code, out, errOut := busbar(t, env, "durable", "send", "home", body, "--device", dev)
	if code != 0 || len(strings.TrimSpace(out)) != 32 {
		t.Fatalf("durable send %q: exit %d, %q %q", body, code, out, errOut)
	}
	return strings.TrimSpace(out), errOut
}

// A listener keeps running through ten broker restarts in a row, five by
// SIGTERM and five by SIGKILL: after each it says it lost the connection
// and got it back, and the message sent then reaches it.
func TestDurableListenSurvivesTenBrokerRestarts(t *testing.T) {
	s, env, laptop, phone := pairedDevices(t)
	p := startProc(t, env, "durable", "listen", "home", "--device", phone)
	for i := range 10 {
		body := fmt.Sprintf("before restart %d", i)
		sendDurable(t, env, laptop, body)
		waitOutput(t, p.out, "durable listen", " "+body+"\n")
		if i%2 == 0 {
			s.stop(t)
		} else {
			s.crash()
		}
		testbroker.Await(t, 20*time.Second, "listen to notice the broker's end", func() error {
			if n := strings.Count(p.out.String(), "busbar durable listen: connection lost"); n != i+1 {
				return fmt.Errorf("%d connection-lost lines:\n%s", n, p.out)
			}
			return nil
		})
		if p.exited() {
			t.Fatalf("listen exited after restart %d (%v):\n%s", i, p.err, p.out)
		}
		s = startServe(t, s.data)
	}
	sendDurable(t, env, laptop, "after the last restart")
	waitOutput(t, p.out, "durable listen", " after the last restart\n")
	if n := strings.Count(p.out.String(), "busbar durable listen: reconnected to "); n != 10 {
		t.Fatalf("%d reconnected lines, want 10:\n%s", n, p.out)
	}
	if p.exited() {
		t.Fatalf("listen exited (%v):\n%s", p.err, p.out)
	}
	if err := p.stop(); err != nil {
		t.Fatalf("listen did not end cleanly on SIGTERM: %v\n%s", err, p.out)
	}
}

// A message sent while the broker is down stays in the outbox (send says
// so, and who will push it); when the broker returns, the sender's
// running listener pushes it at once and the recipient's prints it, with
// no other command run. The bound checked is the sender's poll: only the
// reconnect can explain an arrival before it (the time measured is
// logged; docs/durable.md gives figures).
func TestDurableMessageSentWhileTheBrokerIsDownArrivesOnItsReturn(t *testing.T) {
	s, env, laptop, phone := pairedDevices(t)
	atLaptop := startProc(t, env, "durable", "listen", "home", "--device", laptop)
	atPhone := startProc(t, env, "durable", "listen", "home", "--device", phone)
	// Both listeners are up (each has received) before the broker goes.
	sendDurable(t, env, laptop, "while up")
	waitOutput(t, atPhone.out, "the phone's listen", " while up\n")
	sendDurable(t, env, phone, "while up too")
	waitOutput(t, atLaptop.out, "the laptop's listen", " while up too\n")
	s.stop(t)
	waitOutput(t, atLaptop.out, "the laptop's listen", "connection lost")
	_, errOut := sendDurable(t, env, laptop, "while down")
	if !strings.Contains(errOut, "queued in the outbox; not pushed yet") || !strings.Contains(errOut, "busbar durable listen") {
		t.Fatalf("send with the broker down said %q", errOut)
	}
	startServe(t, s.data)
	back := time.Now()
	waitOutput(t, atPhone.out, "the phone's listen", " while down\n")
	took := time.Since(back)
	t.Logf("delivered %v after the broker was back", took)
	if took >= durable.DefaultPoll {
		t.Fatalf("delivered after %v: not on the reconnect", took)
	}
	for _, p := range []*proc{atLaptop, atPhone} {
		if p.exited() {
			t.Fatalf("a listener exited (%v):\n%s", p.err, p.out)
		}
	}
}

// A handler that always fails: after its attempts the message is given
// up, listen prints a handlerGaveUp line naming it, and --count counts it,
// so listen ends. `durable events --follow`, running beside, prints the
// event as it is raised; it stays buffered for `durable events` and
// `durable status` until `durable events --ack`.
func TestDurableListenReportsAHandlerThatGaveUp(t *testing.T) {
	_, env, laptop, phone := pairedDevices(t)
	id, _ := sendDurable(t, env, laptop, "doomed")
	follow := startProc(t, env, "durable", "events", "--follow", "--json", "--device", phone)
	p := startProc(t, env, "durable", "listen", "home", "--device", phone, "--exec", "echo no >&2; exit 3", "--count", "1")
	if err := p.wait(); err != nil {
		t.Fatalf("listen --count 1: %v\n%s", err, p.out)
	}
	want := "busbar durable listen: handlerGaveUp message " + id
	if !strings.Contains(p.out.String(), want) || !strings.Contains(p.out.String(), ": no") {
		t.Fatalf("listen printed:\n%s\nwant a line %q with the handler's error", p.out, want)
	}
	waitOutput(t, follow.out, "durable events --follow", `"kind":"handlerGaveUp"`)
	if err := follow.stop(); err != nil || !strings.Contains(follow.out.String(), `"message_id":"`+id+`"`) {
		t.Fatalf("durable events --follow: %v\n%s", err, follow.out)
	}
	for range 2 { // reading does not consume
		code, out, errOut := busbar(t, env, "durable", "events", "--json", "--device", phone)
		var ev eventJSON
		if code != 0 || json.Unmarshal([]byte(out), &ev) != nil || ev.Kind != durable.EventHandlerGaveUp || ev.MessageID != id {
			t.Fatalf("durable events: exit %d %q %q", code, out, errOut)
		}
		if code, out, _ := busbar(t, env, "durable", "status", "--device", phone); code != 0 || !strings.Contains(out, "handlerGaveUp message "+id) {
			t.Fatalf("durable status: exit %d %q", code, out)
		}
	}
	if code, _, errOut := busbar(t, env, "durable", "events", "--ack", "--device", phone); code != 0 {
		t.Fatalf("durable events --ack: %d %q", code, errOut)
	}
	if code, out, _ := busbar(t, env, "durable", "events", "--device", phone); code != 0 || out != "" {
		t.Fatalf("after --ack: exit %d %q", code, out)
	}
}

// A second listener of the same device takes the receive session over:
// the first says so and exits with its own status; the second receives.
func TestASecondDurableListenMakesTheFirstExit(t *testing.T) {
	_, env, laptop, phone := pairedDevices(t)
	first := startProc(t, env, "durable", "listen", "home", "--device", phone)
	sendDurable(t, env, laptop, "to the first")
	waitOutput(t, first.out, "the first listen", " to the first\n")
	second := startProc(t, env, "durable", "listen", "home", "--device", phone)
	err := first.wait()
	if exitCode(err) != exitTakenOver || !strings.Contains(first.out.String(), "another listener of device") {
		t.Fatalf("the first listen: %v\n%s", err, first.out)
	}
	sendDurable(t, env, laptop, "to the second")
	waitOutput(t, second.out, "the second listen", " to the second\n")
	if second.exited() {
		t.Fatalf("the second listen exited (%v):\n%s", second.err, second.out)
	}
}

// A listener started before its broker waits for it, saying so, then
// receives.
func TestDurableListenWaitsForItsBroker(t *testing.T) {
	s, env, laptop, phone := pairedDevices(t)
	s.stop(t)
	p := startProc(t, env, "durable", "listen", "home", "--device", phone)
	waitOutput(t, p.out, "listen", "not connected yet")
	startServe(t, s.data)
	sendDurable(t, env, laptop, "you waited")
	waitOutput(t, p.out, "listen", " you waited\n")
}

// Against a relay that speaks only newer protocol versions: send keeps
// the message queued and says relayVersionUnsupported, status shows the
// versions, and listen exits with its own status.
func TestDurableVerbsAgainstARelayOfAnotherVersion(t *testing.T) {
	_, env, laptop, _ := pairedDevices(t)
	sock := filepath.Join(t.TempDir(), "other.sock")
	testbroker.ServeOtherVersion(t, sock, 2, 3)
	env = append(env, "BUSBAR_SERVER=unix://"+sock)
	_, errOut := sendDurable(t, env, laptop, "for a newer relay")
	if !strings.Contains(errOut, "relayVersionUnsupported") || !strings.Contains(errOut, "version 2 to 3") {
		t.Fatalf("send said %q", errOut)
	}
	code, out, _ := busbar(t, env, "durable", "status", "--device", laptop)
	if code != 0 || !strings.Contains(out, "relay relayVersionUnsupported min 2 max 3") || !strings.Contains(out, "outbox 1") {
		t.Fatalf("status: exit %d %q", code, out)
	}
	p := startProc(t, env, "durable", "listen", "home", "--device", laptop)
	if err := p.wait(); exitCode(err) != exitVersionUnsupported || !strings.Contains(p.out.String(), "relayVersionUnsupported") {
		t.Fatalf("listen: %v\n%s", err, p.out)
	}
}

// A `durable send` that cannot reach the relay (its --server names no
// broker) leaves the message queued; the device's running listener,
// connected to the real broker, pushes it, told by the device's change
// signal, and the recipient's listener prints it.
func TestARunningListenPushesWhatAnotherProcessQueued(t *testing.T) {
	_, env, laptop, phone := pairedDevices(t)
	atLaptop := startProc(t, env, "durable", "listen", "home", "--device", laptop)
	atPhone := startProc(t, env, "durable", "listen", "home", "--device", phone)
	sendDurable(t, env, phone, "laptop, are you there")
	waitOutput(t, atLaptop.out, "the laptop's listen", " laptop, are you there\n")
	nowhere := append(append([]string(nil), env...), "BUSBAR_SERVER=unix://"+filepath.Join(t.TempDir(), "no.sock"))
	_, errOut := sendDurable(t, nowhere, laptop, "through the listener")
	if !strings.Contains(errOut, "not pushed yet") {
		t.Fatalf("send said %q", errOut)
	}
	waitOutput(t, atPhone.out, "the phone's listen", " through the listener\n")
}
