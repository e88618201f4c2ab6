package port

// A port behind the edge's door: its accept loop is edge.Accept, and
// every refusal a caller can cause is written through the door's refusal
// log, never to its log.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/edge"
	"busbar/edge/edgetest"
	"busbar/internal/testbroker"
)

// A temporary accept failure is the edge's to retry: counted under
// DoorName, logged once, and the port serves on.
func TestATemporaryAcceptFailureIsRetriedByTheEdge(t *testing.T) {
	logs := &edgetest.LogBuffer{}
	cfg := notes()
	cfg.Door = edge.Door{Log: slog.New(slog.NewTextHandler(logs, nil))}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shortDir(t), "notes.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	before := edge.AcceptFailures()[DoorName]
	done := make(chan error, 1)
	go func() { done <- s.Serve(edgetest.EMFILE(l, 1)) }()
	defer func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	}()
	if got := rawCall(t, path, greetReq); got != greetReply {
		t.Fatalf("after an accept failure: %q", got)
	}
	if got := edge.AcceptFailures()[DoorName] - before; got != 1 {
		t.Fatalf("%d accept failures counted for %s, want 1", got, DoorName)
	}
	if !strings.Contains(logs.String(), "accept failed") {
		t.Fatalf("the door's log: %q", logs.String())
	}
}

// Each refusal (busy, too large, read timeout, malformed) is one line of
// the door's refusal log, naming its reason and the port.
func TestEveryRefusalGoesThroughTheDoorsRefusalLog(t *testing.T) {
	logs, other := &edgetest.LogBuffer{}, &edgetest.LogBuffer{}
	cfg := notes()
	cfg.MaxConns = 1
	cfg.MaxRequestBytes = len(greetReq)
	cfg.ReadTimeout = time.Second // a prompt caller on a busy machine stays well inside it
	cfg.Door = edge.Door{
		Log:      slog.New(slog.NewTextHandler(other, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Refusals: edge.NewRefusalLog(slog.New(slog.NewTextHandler(logs, nil))),
	}
	entered, release := make(chan struct{}), make(chan struct{})
	cfg.Commands["block"] = Command{Description: "holds its place until released", Run: func(ctx context.Context, _ json.RawMessage) (any, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}}
	path, s := serve(t, cfg)
	free := func() { // the one place given back by the call before
		testbroker.Eventually(t, 10*time.Second, "the place free", func() bool { return len(s.slots) == 0 })
	}
	if got := rawCall(t, path, "hello\n"); !strings.Contains(got, "malformed request") {
		t.Fatalf("not a frame: %q", got)
	}
	free()
	if got := rawCall(t, path, greetReq+" "); !strings.Contains(got, "MaxRequestBytes") {
		t.Fatalf("one byte past MaxRequestBytes: %q", got)
	}
	free()
	holder := dialRaw(t, path) // holds the one place while its command runs
	defer holder.Close()
	if _, err := io.WriteString(holder, "---\ncommand: block\n---\n"); err != nil {
		t.Fatal(err)
	}
	if err := holder.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking command did not start")
	}
	busy := dialRaw(t, path)
	got, _ := io.ReadAll(busy) // the reply, then maybe a reset: the port closes at once
	busy.Close()
	if !strings.Contains(string(got), "busy") {
		t.Fatalf("past MaxConns: %q", got)
	}
	close(release)
	if got := readReply(t, holder); !strings.HasSuffix(got, "rc: 0\n---\nnull\n") {
		t.Fatalf("the blocked call: %q", got)
	}
	free()
	slow := dialRaw(t, path) // sends nothing: told why at ReadTimeout
	defer slow.Close()
	if got := readReply(t, slow); !strings.Contains(got, "ReadTimeout") {
		t.Fatalf("a slow peer: %q", got)
	}
	lines := logs.String()
	for _, reason := range []string{RefusedMalformed, RefusedTooLarge, RefusedBusy, RefusedTimeout} {
		if !strings.Contains(lines, "port: refused a request: "+reason) || !strings.Contains(lines, "reason="+reason) {
			t.Errorf("no %s line in the refusal log:\n%s", reason, lines)
		}
	}
	if n := strings.Count(lines, "port=notes"); n != 4 {
		t.Errorf("%d lines name the port, want 4:\n%s", n, lines)
	}
	if s := other.String(); s != "" {
		t.Errorf("the door's log has warnings:\n%s", s)
	}
}
