//go:build linux

package cli

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
)

// serveFileLimit is the descriptor limit the flooded broker runs under:
// room for its stores, listeners and a few clients, far below the
// connections the flood opens (floodConns).
const (
	serveFileLimit = 96
	floodConns     = 3 * serveFileLimit
)

// TestServeSurvivesRunningOutOfFileDescriptors runs `busbar serve` under
// a small RLIMIT_NOFILE (a shell's ulimit, then exec) and opens more TCP
// connections than it has descriptors. Its accepts fail with "too many
// open files": the broker pauses and retries (edge.Accept) instead of
// shutting down, keeps serving the clients that logged in before, logs
// the failure at most once a second, and logs in a new client once the flood
// has gone.
func TestServeSurvivesRunningOutOfFileDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker process")
	}
	wrapper := []string{"sh", "-c", `ulimit -n ` + itoa(serveFileLimit) + ` && exec "$@"`, "sh"}
	s := startServeUnder(t, wrapper, filepath.Join(t.TempDir(), "state"))
	if !strings.Contains(s.stderr.String(), "file-descriptor limit is below") {
		t.Errorf("serve under a limit of %d said nothing of it at start:\n%s", serveFileLimit, s.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pub := busClient(t, ctx, s, "before-pub")
	sub := busClient(t, ctx, s, "before-sub")
	got := make(chan string, 16)
	if _, err := sub.Scope("t").Channel("news").Subscribe(ctx, func(_ context.Context, m *client.Message) {
		got <- string(m.Payload())
	}); err != nil {
		t.Fatal(err)
	}

	addr := tcpAddrOf(t, s)
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range floodConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break // the listen backlog is full: the broker is past its limit
		}
		flood = append(flood, c)
	}
	testbroker.AwaitEvery(t, time.Minute, 20*time.Millisecond, "the broker to run out of descriptors", func() error {
		if !strings.Contains(s.stderr.String(), "accept failed") {
			return errString("no accept failure logged yet")
		}
		return nil
	})

	// Out of descriptors, the broker still serves its logged-in clients.
	r, err := pub.Scope("t").Channel("news").Send(ctx, "before-sub", []byte("during the flood"))
	if err != nil || r.Result != "ACCEPTED" {
		t.Fatalf("a send between logged-in clients during the flood: %+v, %v", r, err)
	}
	if m := <-got; m != "during the flood" {
		t.Fatalf("the subscriber got %q", m)
	}

	for _, c := range flood {
		c.Close()
	}
	flood = nil
	// Once the flood has gone, a new client logs in.
	testbroker.AwaitEvery(t, time.Minute, 50*time.Millisecond, "a new client to log in after the flood", func() error {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		c, err := dialBusClient(cctx, s, "after")
		if err != nil {
			return err
		}
		return c.Close()
	})
	if n := strings.Count(s.stderr.String(), "accept failed"); n > 4 {
		t.Errorf("the accept failure was logged %d times for one flood; want at most one a second:\n%s", n, s.stderr.String())
	}
}

// tcpAddrOf is the address of s's TCP listener, from its banner.
func tcpAddrOf(t *testing.T, s *server) string {
	t.Helper()
	for line := range strings.SplitSeq(s.banner, "\n") {
		if a, ok := strings.CutPrefix(line, "busbar: listening on tcp://"); ok {
			return strings.Fields(a)[0]
		}
	}
	t.Fatalf("no tcp listener in serve's banner:\n%s", s.banner)
	return ""
}
