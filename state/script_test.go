package state

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.txt with the actual output")

// TestScripts runs the scenarios in testdata/*.txt against the state
// machine, in the style of etcd-io/raft's interaction tests: each command
// is followed by "----" and the output it must print, up to a blank line.
//
//	ns NAME OWNER                   a namespace and the replicas that follow it
//	write SRC KEY VER JSON [open]   a client write, applied by the broker's namespace
//	delete SRC KEY VER
//	deliver REPLICA [SEQ...]        the broker's numbered deltas reach a replica (all, or only SEQs)
//	resync REPLICA                  the replica merges a broker snapshot
//	dump NAME                       "broker" or a replica: its entries
func TestScripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScript(t, file) })
	}
}

type scenario struct {
	broker   *Namespace
	log      []Delta // every delta the broker applied, by seq
	replicas map[string]*Namespace
}

func runScript(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out   strings.Builder // the rewritten file
		sc    = &scenario{replicas: map[string]*Namespace{}}
		lines = bufio.NewScanner(f)
		fail  bool
	)
	for lines.Scan() {
		line := lines.Text()
		out.WriteString(line + "\n")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var want []string
		if !lines.Scan() || lines.Text() != "----" {
			t.Fatalf("%s: %q is not followed by ----", file, line)
		}
		for lines.Scan() && lines.Text() != "" {
			want = append(want, lines.Text())
		}
		got := sc.run(t, strings.Fields(line))
		out.WriteString("----\n")
		for _, g := range got {
			out.WriteString(g + "\n")
		}
		out.WriteString("\n")
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			fail = true
			if !*rewrite {
				t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", file, line, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	if fail && *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (sc *scenario) run(t *testing.T, args []string) []string {
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q", s)
		}
		return n
	}
	switch args[0] {
	case "ns":
		sc.broker = New(args[1], args[2])
		for _, r := range args[3:] {
			sc.replicas[r] = New(args[1], args[2])
		}
		return []string{fmt.Sprintf("namespace %s owned by %s, replicas %s", args[1], args[2], strings.Join(args[3:], " "))}
	case "write", "delete":
		d := Delta{NS: sc.broker.Name(), Source: args[1], Key: args[2], Version: num(args[3])}
		if args[0] == "delete" {
			d.Deleted = true
		} else {
			d.Value = json.RawMessage(args[4])
			d.Open = len(args) > 5 && args[5] == "open"
		}
		e, err := sc.broker.Apply(d)
		switch {
		case errors.Is(err, ErrStale):
			return []string{"stale: stored " + show(e)}
		case errors.Is(err, ErrForeign):
			return []string{fmt.Sprintf("refused: foreign write (refused %d)", sc.broker.Refused())}
		case err != nil:
			return []string{"error: " + err.Error()}
		}
		seq := sc.broker.Advance()
		sc.log = append(sc.log, sc.broker.Delta(e, seq))
		return []string{fmt.Sprintf("applied seq=%d %s", seq, show(e))}
	case "deliver":
		r := sc.replicas[args[1]]
		var out []string
		for _, d := range sc.log {
			if len(args) > 2 && !contains(args[2:], strconv.FormatUint(d.Seq, 10)) {
				continue
			}
			e, changed, gap := r.Follow(d)
			switch {
			case gap:
				out = append(out, fmt.Sprintf("seq=%d gap (replica at %d)", d.Seq, r.Seq()))
			case changed:
				out = append(out, fmt.Sprintf("seq=%d changed %s", d.Seq, show(e)))
			default:
				out = append(out, fmt.Sprintf("seq=%d ignored", d.Seq))
			}
		}
		return out
	case "resync":
		r := sc.replicas[args[1]]
		changed := r.Merge(sc.broker.Snapshot())
		out := []string{fmt.Sprintf("merged snapshot seq=%d: %d changed", sc.broker.Seq(), len(changed))}
		for _, e := range changed {
			out = append(out, "  "+show(e))
		}
		return out
	case "dump":
		n := sc.broker
		if args[1] != "broker" {
			n = sc.replicas[args[1]]
		}
		s := n.Snapshot()
		out := []string{fmt.Sprintf("seq=%d clock=%d", s.Seq, n.Clock())}
		for _, e := range s.Entries {
			out = append(out, "  "+show(e))
		}
		return out
	}
	t.Fatalf("unknown command %q", args[0])
	return nil
}

func show(e Entry) string {
	s := fmt.Sprintf("%s=%s ver=%d src=%s", e.Key, e.Value, e.Version, e.Source)
	if e.Deleted {
		s = fmt.Sprintf("%s deleted ver=%d src=%s", e.Key, e.Version, e.Source)
	}
	if e.Open {
		s += " open"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
