package cli

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"busbar/loadgen"
)

// TestBenchEndToEnd runs every `busbar bench` workload briefly against a
// `busbar serve` child process, so the tool cannot silently rot.
func TestBenchEndToEnd(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	parse := func(t *testing.T, out string) []loadgen.Result {
		t.Helper()
		var rs []loadgen.Result
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		return rs
	}
	t.Run("pubsub", func(t *testing.T) {
		code, out, errOut := s.busbar(t, "", "bench", "pubsub", "--msgs", "2000", "--subs", "2", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		rs := parse(t, out)
		if len(rs) != 3 || rs[0].Name != "pub" || rs[0].Msgs != 2000 || (rs[0].MsgsPerS > 0) == rs[0].TooShort {
			t.Fatalf("results %+v", rs)
		}
		for _, r := range rs[1:] {
			// Streams are best effort, but at this rate nothing is dropped.
			if r.Msgs != 2000 || r.Latency == nil || r.Latency.Count != 2000 || r.Latency.P50 <= 0 || r.Latency.Max < r.Latency.P99 {
				t.Fatalf("subscriber %+v %+v", r, r.Latency)
			}
		}
	})
	t.Run("req", func(t *testing.T) {
		code, out, errOut := s.busbar(t, "", "bench", "req", "--msgs", "500", "--clients", "2", "--concurrency", "4", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		rs := parse(t, out)
		l := rs[0].Latency
		if len(rs) != 1 || rs[0].Msgs != 500 || rs[0].Errors != 0 || l == nil || l.Count != 500 ||
			!(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Fatalf("results %+v %+v", rs, l)
		}
	})
	t.Run("pub and sub", func(t *testing.T) {
		out, wait := s.background(t, "bench", "sub", "flow", "--msgs", "1000", "--csv")
		s.waitLs(t, "bench subscriber", func(nodes []map[string]any) bool {
			for _, n := range nodes {
				if strings.HasPrefix(n["node"].(string), "bench-sub") {
					return true
				}
			}
			return false
		})
		code, pubOut, errOut := s.busbar(t, "", "bench", "pub", "flow", "--msgs", "1000", "--duration", "20s")
		if code != 0 || !strings.Contains(pubOut, "MSGS/S") {
			t.Fatalf("pub: exit %d: %s %s", code, pubOut, errOut)
		}
		if err := wait(); err != nil {
			t.Fatalf("sub: %v: %s", err, out.String())
		}
		lines := strings.Split(out.String(), "\n")
		var csvLines []string // stdout's CSV; the notes on stderr are mixed in, and start "busbar "
		for _, l := range lines {
			if strings.HasPrefix(l, "name,") || (len(csvLines) > 0 && !strings.HasPrefix(l, "busbar ")) {
				csvLines = append(csvLines, l)
			}
		}
		csvText := strings.Join(csvLines, "\n")
		rows, err := csv.NewReader(strings.NewReader(csvText)).ReadAll()
		if err != nil || len(rows) != 2 || rows[1][0] != "sub" || rows[1][1] != "1000" {
			t.Fatalf("sub CSV: %v %q", err, out.String())
		}
	})
	t.Run("bounded by duration", func(t *testing.T) {
		// --msgs 0 sets no count: that it ends at all is the duration's doing.
		code, out, _ := s.busbar(t, "", "bench", "pub", "--msgs", "0", "--duration", "300ms", "--json")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		if rs := parse(t, out); rs[0].Msgs == 0 {
			t.Fatalf("results %+v", rs)
		}
	})
	t.Run("usage", func(t *testing.T) {
		if code, _, errOut := s.busbar(t, "", "bench", "pub", "--size", "4"); code != exitUsage || !strings.Contains(errOut, "minimum") {
			t.Fatalf("size 4: exit %d %s", code, errOut)
		}
		if code, _, _ := s.busbar(t, "", "bench", "nope"); code != exitUsage {
			t.Fatal("unknown workload")
		}
	})
}

// TestBenchSaysWhatWentMissingAndWhy: through the binary, `bench sub`
// that gets fewer messages than --msgs names the shortfall and exits 1, and
// a publisher whose operations fail names the first failure and exits 1.
func TestBenchSaysWhatWentMissingAndWhy(t *testing.T) {
	t.Run("fewer than --msgs", func(t *testing.T) {
		s := startServe(t, filepath.Join(t.TempDir(), "state"))
		out, wait := s.background(t, "bench", "sub", "short", "--msgs", "100", "--duration", "20s")
		s.waitLs(t, "bench subscriber", func(nodes []map[string]any) bool {
			for _, n := range nodes {
				if strings.HasPrefix(n["node"].(string), "bench-sub") {
					return true
				}
			}
			return false
		})
		if code, pubOut, errOut := s.busbar(t, "", "bench", "pub", "short", "--msgs", "60", "--size", "32"); code != 0 {
			t.Fatalf("pub: exit %d: %s %s", code, pubOut, errOut)
		}
		err := wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitFail {
			t.Fatalf("sub: %v, want exit %d: %s", err, exitFail, out.String())
		}
		if want := "busbar bench sub: received 60 of the 100 messages expected (--msgs; 40 missing)\n"; !strings.Contains(out.String(), want) {
			t.Fatalf("sub output %q lacks %q", out.String(), want)
		}
	})
	t.Run("the first failure", func(t *testing.T) {
		s := startServe(t, filepath.Join(t.TempDir(), "state"), "--max-payload", "64")
		code, _, errOut := s.busbar(t, "", "bench", "pubsub", "--msgs", "10", "--size", "128")
		if want := "busbar bench: pub: 1 failed, the first with: client: payload too large: 128 bytes exceeds the broker's limit of 64\n"; code != exitFail || !strings.Contains(errOut, want) {
			t.Fatalf("exit %d, stderr %q lacks %q", code, errOut, want)
		}
	})
}

// A subscriber that received fewer messages than were sent is named, with
// what it missed; one that received them all is not.
func TestBenchShortfallsNameWhoMissedMessages(t *testing.T) {
	sent := loadgen.Result{Name: "pub", Msgs: 200000}
	got := shortfalls(sent, []loadgen.Result{{Name: "sub-0", Msgs: 200000}, {Name: "sub-1", Msgs: 199986}})
	if want := []string{"sub-1 received 199986 of the 200000 messages sent (14 missing)"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("shortfalls %q, want %q", got, want)
	}
}

// The progress bar is as far along as the nearer of --msgs and
// --duration (a run ended by --duration reads 100 %, not the share of
// --msgs it reached), and end finishes its line so the table that
// follows starts on a line of its own. Under synctest: its clock is fake.
func TestProgressBarFollowsTheNearerLimitAndEndsItsLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		update, end := progressBar(&buf, 1000, 10*time.Second)
		update(50)
		end()
		if buf.Len() != 0 {
			t.Fatalf("drawn before a second: %q", buf.String())
		}
		time.Sleep(2 * time.Second)
		update(100) // 10 % of --msgs, 20 % of --duration
		if !strings.Contains(buf.String(), " 20%") {
			t.Fatalf("at 2 s of 10 s: %q", buf.String())
		}
		time.Sleep(8 * time.Second)
		update(190)
		end()
		last := buf.String()[strings.LastIndex(buf.String(), "\r"):]
		if !strings.Contains(last, "100%  190 msgs") || !strings.HasSuffix(last, "\n") {
			t.Fatalf("at the end of --duration: %q", last)
		}
		end()
		if strings.Count(buf.String(), "\n") != 1 {
			t.Fatalf("end twice: %q", buf.String())
		}
	})
}

// On a terminal (script(1) gives bench one), a run ended by --duration
// long before its --msgs
// draws its bar to 100 % and ends the bar's line, so the table's header
// starts a line of its own.
func TestBenchOnATerminalEndsItsBarBeforeTheTable(t *testing.T) {
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) is not installed")
	}
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	cmd := exec.Command(scriptCmd, "-qec", binPath+" bench pub --msgs 1000000000 --duration 2s", "/dev/null")
	cmd.Env = append(cmd.Environ(), "BUSBAR_DATA="+s.data)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench on a terminal: %v\n%q", err, raw)
	}
	out := strings.ReplaceAll(string(raw), "\r\n", "\n")
	bar := out[:max(0, strings.Index(out, "NAME"))]
	if !strings.Contains(bar, "100%") || !strings.HasSuffix(strings.TrimRight(bar, " "), "\n") {
		t.Fatalf("the bar before the table: %q", bar)
	}
	if !strings.Contains(out, "\n") || !regexp.MustCompile(`(?m)^\s*NAME\s+MSGS`).MatchString(out) {
		t.Fatalf("the table's header is not on a line of its own:\n%q", out)
	}
}

// A run too short to measure prints no rate, and says why on stderr.
func TestBenchTooShortARunReportsNoRate(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "d"))
	code, out, errOut := s.busbar(t, "", "bench", "pub", "--msgs", "3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rs []loadgen.Result
	if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 1 {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	r := rs[0]
	if r.TooShort != (r.Duration < loadgen.MinRateWindow) || r.TooShort != (r.MsgsPerS == 0) {
		t.Fatalf("%+v", r)
	}
	if r.TooShort != strings.Contains(errOut, "too few to measure a rate") {
		t.Fatalf("too short %v, stderr %q", r.TooShort, errOut)
	}
}
