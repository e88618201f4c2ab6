//go:build unix

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/internal/testbroker"
	"busbar/ops"
	"busbar/transport"
)

// TestMaxQueueMessagesHoldsThatManyForAStoppedSubscriber: `busbar serve
// --max-queue-messages 2` holds exactly two events for a subscriber that
// stopped reading (SIGSTOP; Windows cannot stop a process, hence the
// build line), refuses the next one BACKPRESSURED, and delivers the held
// ones when the subscriber reads again.
//
// Each payload (2.5 MiB, with --max-payload raised for it) is larger than
// what the kernel buffers on a Unix socket (transport.UnixSendBuffer,
// which Linux doubles for its bookkeeping), so the broker's writer is
// stuck on the first event and the queue behind it holds the next ones:
// events 2 and 3 fill the queue (at the limit), event 4 is one past it.
// Each step waits for the broker's status to show the queue it expects,
// never for a deadline, so a slow machine only makes the test slower;
// the held publications have a deadline far past the test's length.
func TestMaxQueueMessagesHoldsThatManyForAStoppedSubscriber(t *testing.T) {
	const limit = 2
	payload := strings.Repeat("x", 2*transport.UnixSendBuffer+512<<10)
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--max-queue-messages", strconv.Itoa(limit),
		"--max-payload", strconv.Itoa(len(payload)))
	status := statusReader(t, s)

	sub := exec.Command(binPath, "sub", "news", "--name", "slow")
	sub.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sub.Process.Signal(syscall.SIGCONT)
		_ = sub.Process.Kill()
		_ = sub.Wait()
	})
	s.waitLs(t, "slow subscribed to news", hasNode("slow", "subscriptions", "news"))
	if err := sub.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// One event in the writer's hands (what the socket refused of it is
	// queued bytes, no message waiting), then limit events waiting behind
	// it, one at a time so the writer never takes two.
	const writing = 256 << 10 // less than the part of a payload no socket buffer takes
	var held []*heldPub
	for i := range limit + 1 {
		held = append(held, startPub(t, s, payload))
		testbroker.AwaitEvery(t, time.Minute, 20*time.Millisecond, fmt.Sprintf("event %d held", i+1), func() error {
			q := status()
			if q.QueueMax != int64(i) || q.QueueBytesMax < writing {
				return fmt.Errorf("longest queue %d messages, %d bytes", q.QueueMax, q.QueueBytesMax)
			}
			return nil
		})
	}
	// One past the limit: refused at once, and said so per node.
	code, out, errOut := s.busbar(t, payload, "pub", "news", "-", "--timeout", "1m")
	if code != exitFail || !strings.Contains(out, "slow BACKPRESSURED\n") {
		t.Fatalf("one event past the queue's limit: exit %d %q %s", code, out, errOut)
	}
	// The subscriber reads again: the held events were held, not refused,
	// and are delivered. (Unless the broker's write timeout, 10 s, passed
	// before this point and it dropped the stopped node: only a very slow
	// machine gets here that late, and then the results say so.)
	if err := sub.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i, p := range held {
		err := p.wait()
		switch out := p.out.String(); {
		case strings.Contains(out, "BACKPRESSURED"):
			t.Errorf("held event %d was refused: %q", i+1, out)
		case err != nil || !strings.Contains(out, "slow ACCEPTED\n"):
			t.Logf("held event %d not delivered (the broker dropped the stopped node?): %v %q", i+1, err, out)
		}
	}
}

// heldPub is a `busbar pub` of a payload from stdin, running.
type heldPub struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// startPub publishes payload on news with a deadline no test waits for.
func startPub(t *testing.T, s *server, payload string) *heldPub {
	t.Helper()
	p := &heldPub{out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(binPath, "pub", "news", "-", "--timeout", "10m")
	p.cmd.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
	p.cmd.Stdin = strings.NewReader(payload)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

// wait waits for the publication's end; the broker answers for the
// stopped node once it reads (or at the deadline, which is far).
func (p *heldPub) wait() error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("no answer in a minute")
	}
}

// statusReader returns a function reading the traffic part of serve's
// status API, with the token serve printed.
func statusReader(t *testing.T, s *server) func() ops.TrafficStatus {
	t.Helper()
	m := regexp.MustCompile(`busbar: dashboard at (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]+)\n`).FindStringSubmatch(s.banner + "\n")
	if m == nil {
		t.Fatalf("serve printed no dashboard URL:\n%s", s.banner)
	}
	return func() ops.TrafficStatus {
		code, body := httpGet(t, m[1]+ops.StatusPath, m[2])
		var st ops.Status
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("status: %d %.200s", code, body)
		}
		return st.Traffic
	}
}
