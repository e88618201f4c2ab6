package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"busbar/transport"
)

// TestMaxQueueMessagesHoldsThatManyForAStoppedSubscriber: `busbar serve
// --max-queue-messages 2` holds exactly two events for a subscriber that
// stopped reading (SIGSTOP), and answers the next one BACKPRESSURED.
//
// Each payload (2.5 MiB, with --max-payload raised for it) is larger than
// what the kernel buffers on a Unix socket (transport.UnixSendBuffer,
// which Linux doubles for its bookkeeping), so the broker's writer is
// stuck on the first event and the queue behind it holds the next ones:
// events 2 and 3 fill the queue (at the limit), event 4 is one past it.
// The held events are not answered (the stopped node cannot accept them):
// the broker answers TIMED_OUT for that node just before the
// publication's deadline.
func TestMaxQueueMessagesHoldsThatManyForAStoppedSubscriber(t *testing.T) {
	const limit = 2
	payload := strings.Repeat("x", 2*transport.UnixSendBuffer+512<<10)
	s := startServe(t, filepath.Join(t.TempDir(), "state"), "--max-queue-messages", "2",
		"--max-payload", strconv.Itoa(len(payload)))

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

	// One event in the writer's hands, then limit events queued: all held.
	// A 1 s deadline gets the longest answer lead (100 ms), so a loaded
	// machine still brings the TIMED_OUT result in time, and the three
	// stay well inside the broker's 10 s write timeout.
	for i := range limit + 1 {
		code, out, errOut := s.busbar(t, payload, "pub", "news", "-", "--timeout", "1s")
		if code != exitFail || !strings.Contains(out, "slow TIMED_OUT\n") {
			t.Fatalf("event %d of %d held: exit %d %q %s", i+1, limit+1, code, out, errOut)
		}
	}
	// One past the limit: refused at once, and said so per node.
	code, out, errOut := s.busbar(t, payload, "pub", "news", "-", "--timeout", "5s")
	if code != exitFail || !strings.Contains(out, "slow BACKPRESSURED\n") {
		t.Fatalf("one event past the queue's limit: exit %d %q %s", code, out, errOut)
	}
}
