package relay

// The test binary fails if a test leaves a goroutine behind. This file
// also holds the helpers the tests share: a store in a temp dir closed by
// t.Cleanup, a fake clock, and short ways to push and receive.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"busbar/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		crashHelper() // a child process of TestKillMidWrite; never returns
	}
	leakcheck.Main(m)
}

// quiet is the logger of every test store: the tests check what is logged
// through Stats, and the torn-tail tests would flood the output.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// open opens a store in dir (a new temp dir if ""), closed at cleanup.
func open(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clock is a fake clock: it moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func push(t testing.TB, s *Store, device string, blob []byte) Seq {
	t.Helper()
	seq, err := s.Push(ctx(t), device, blob)
	if err != nil {
		t.Fatalf("push to %s: %v", device, err)
	}
	return seq
}

func session(t testing.TB, s *Store, device string) *Session {
	t.Helper()
	ss, err := s.Session(device)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

func next(t testing.TB, ss *Session) Blob {
	t.Helper()
	b, err := ss.Next(ctx(t))
	if err != nil {
		t.Fatalf("next for %s: %v", ss.device, err)
	}
	return b
}

// drained checks that the session has nothing more to deliver now. The
// wait is short: an inbox's blobs are ready when Push returns.
func drained(t testing.TB, ss *Session) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if b, err := ss.Next(c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next for %s: want nothing, got seq %d %q, %v", ss.device, b.Seq, b.Data, err)
	}
}

// inboxOf returns every blob a new session delivers now, in order.
func inboxOf(t testing.TB, s *Store, device string) []Blob {
	t.Helper()
	ss := session(t, s, device)
	var out []Blob
	for {
		b, ok := ss.nextNow()
		if !ok {
			return out
		}
		out = append(out, b)
	}
}

// nextNow is Next without the wait: the next blob, if there is one now.
func (ss *Session) nextNow() (Blob, bool) {
	s := ss.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ib := s.inboxes[ss.device]
	if ib == nil || s.closing {
		return Blob{}, false
	}
	return s.nextLocked(ss, ib)
}

// want is an expected blob: its seq and bytes.
type want struct {
	seq  Seq
	data []byte
}

func checkInbox(t testing.TB, s *Store, device string, wants []want) {
	t.Helper()
	got := inboxOf(t, s, device)
	if len(got) != len(wants) {
		t.Fatalf("%s: %d blobs, want %d", device, len(got), len(wants))
	}
	for i, w := range wants {
		if got[i].Seq != w.seq || !bytes.Equal(got[i].Data, w.data) {
			t.Fatalf("%s blob %d: seq %d %q, want seq %d %q", device, i, got[i].Seq, clip(got[i].Data), w.seq, clip(w.data))
		}
	}
}

func clip(b []byte) []byte {
	if len(b) > 24 {
		return b[:24]
	}
	return b
}

// copyDir copies the store's files (not its lock) from src into a new temp
// dir: the disk as a crash at this moment would leave it, given that
// what was written reached the file.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// segFiles returns the paths of dir's segments, oldest first.
func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	nums, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nums {
		out = append(out, filepath.Join(dir, segName(n)))
	}
	return out
}

func ctxBackground() context.Context { return context.Background() }
