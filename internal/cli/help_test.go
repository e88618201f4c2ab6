package cli

// Help and usage through the built binary: every verb and subcommand
// answers --help, -h and `busbar help PATH` on stdout with exit 0, and a
// usage error is one line on stderr with exit 2.

import (
	"busbar/wire"
	"regexp"
	"strings"
	"testing"
)

// singleDashFlag finds a flag written -name instead of --name.
var singleDashFlag = regexp.MustCompile(`(^|[\s(\[,])-[a-z][a-z-]+`)

// TestVerbOrderIsRegistered: every verb of verbOrder registered itself
// (addVerb), so `busbar help` lists each, in that order.
func TestVerbOrderIsRegistered(t *testing.T) {
	if got := strings.Join(verbNames(), " "); got != strings.Join(verbOrder, " ") {
		t.Errorf("verbs in help order:\n%s\nwant verbOrder:\n%s", got, strings.Join(verbOrder, " "))
	}
	for _, name := range verbOrder {
		if verbs[name] == nil {
			t.Errorf("verb %q has no run function", name)
		}
	}
}

func TestEveryVerbAndSubcommandHasHelp(t *testing.T) {
	for name := range verbs {
		if _, ok := page(name); !ok {
			t.Errorf("verb %q has no help page", name)
		}
	}
	for _, p := range helpPages {
		verb, _, _ := strings.Cut(p.path, " ")
		if verbs[verb] == nil {
			t.Errorf("help page %q: no verb %q", p.path, verb)
		}
		args := strings.Fields(p.path)
		code, out, errOut := runEnv(t, nil, "", append(args, "--help")...)
		if code != 0 || errOut != "" {
			t.Errorf("busbar %s --help: exit %d, stderr %q", p.path, code, errOut)
			continue
		}
		for _, want := range []string{"usage: busbar " + p.path, "\nExit status:\n  0  ", "\nExamples:\n  $ "} {
			if !strings.Contains(out, want) {
				t.Errorf("busbar %s --help lacks %q:\n%s", p.path, want, out)
			}
		}
		if m := singleDashFlag.FindString(out); m != "" {
			t.Errorf("busbar %s --help writes a flag with one dash (%q):\n%s", p.path, m, out)
		}
		if strings.HasPrefix(p.path, "bench ") || p.path == "pub" || p.path == "serve" {
			if !strings.Contains(out, "\nFlags:\n  --") {
				t.Errorf("busbar %s --help lists no flags:\n%s", p.path, out)
			}
		}
		for _, other := range [][]string{append(args, "-h"), append([]string{"help"}, args...)} {
			code, out2, errOut := runEnv(t, nil, "", other...)
			if code != 0 || errOut != "" || out2 != out {
				t.Errorf("busbar %s: exit %d, stderr %q, and stdout differs from --help: %q", strings.Join(other, " "), code, errOut, out2)
			}
		}
	}
}

// pub and send name every result a publication or a receipt can carry
// (wire's vocabulary), so no line they print is left unexplained.
func TestPubHelpExplainsItsOutput(t *testing.T) {
	results := []wire.Result{wire.Accepted, wire.NoSubscriber, wire.NotConnected, wire.Backpressured, wire.Rejected, wire.TimedOut, wire.Failed}
	_, out, _ := runEnv(t, nil, "", "help", "pub")
	for _, want := range []string{"0  at least one node accepted", "1  no node accepted", "--server URL[,URL...]", "--timeout DURATION"} {
		if !strings.Contains(out, want) {
			t.Errorf("busbar help pub lacks %q:\n%s", want, out)
		}
	}
	for _, r := range results {
		if !strings.Contains(out, "\n  "+string(r)+" ") {
			t.Errorf("busbar help pub does not explain %s:\n%s", r, out)
		}
	}
	_, out, _ = runEnv(t, nil, "", "send", "--help")
	for _, r := range results {
		if !strings.Contains(out, string(r)) {
			t.Errorf("busbar send --help does not name the receipt %s:\n%s", r, out)
		}
	}
}

func TestOverviewAndVersion(t *testing.T) {
	var first string
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runEnv(t, nil, "", args...)
		if code != 0 || errOut != "" {
			t.Fatalf("busbar %s: exit %d, stderr %q", args[0], code, errOut)
		}
		for _, v := range verbNames() {
			if !strings.Contains(out, "\n  "+v+" ") {
				t.Errorf("busbar %s does not list %s", args[0], v)
			}
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("busbar %s differs from busbar --help", args[0])
		}
	}
	code, out, errOut := runEnv(t, nil, "")
	if code != exitUsage || out != "" || errOut != first {
		t.Errorf("busbar with no verb: exit %d, stdout %q; want the overview on stderr", code, out)
	}
	_, version, _ := runEnv(t, nil, "", "version")
	code, out, errOut = runEnv(t, nil, "", "--version")
	if code != 0 || errOut != "" || out != version || !strings.HasPrefix(out, "busbar ") {
		t.Errorf("busbar --version: exit %d, %q, stderr %q; busbar version says %q", code, out, errOut, version)
	}
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pubb"}, `busbar: unknown verb "pubb" (did you mean "pub"?)`},
		{[]string{"sreve"}, `busbar: unknown verb "sreve" (did you mean "serve"?)`},
		{[]string{"zzzzzz"}, `busbar: unknown verb "zzzzzz"`},
		{[]string{"--sever"}, `busbar: unknown flag --sever before the verb (usage: busbar VERB [arguments] [flags])`},
		{[]string{"pub", "news", "--sever", "x"}, `busbar pub: unknown flag --sever (did you mean --server?)`},
		{[]string{"pub", "--jsno", "news"}, `busbar pub: unknown flag --jsno (did you mean --json?)`},
		{[]string{"pub", "--zzzzz", "news"}, `busbar pub: unknown flag --zzzzz`}, // nothing near it: no suggestion
		{[]string{"sub", "news", "--jsno"}, `busbar sub: unknown flag --jsno (did you mean --json?)`},
		{[]string{"serve", "--tpc", "off"}, `busbar serve: unknown flag --tpc (did you mean --tcp?)`},
		{[]string{"pub"}, `busbar pub: missing CHANNEL`},
		{[]string{"send", "node"}, `busbar send: missing CHANNEL`},
		{[]string{"state", "set", "ns", "k"}, `busbar state set: missing VALUE`},
		{[]string{"state", "get", "bad ns", "k"}, `busbar state get: namespace "bad ns": state: invalid delta: namespace name holds whitespace or a control character`},
		{[]string{"state", "del", "home", ""}, `busbar state del: key "": state: invalid delta: a key must be 1 to 256 bytes`},
		{[]string{"pub", "news", "hello", "world"}, `busbar pub: unexpected argument "world"`},
		{[]string{"serve", "extra"}, `busbar serve: unexpected argument "extra"`},
		{[]string{"frame", "validate", "x"}, `busbar frame validate: unexpected argument "x"`},
		{[]string{"addr"}, `busbar addr: missing ADDRESS`},
		{[]string{"state"}, `busbar state: missing subcommand (get, set, del, open, dump, watch, drop or owner)`},
		{[]string{"state", "sett"}, `busbar state: unknown subcommand "sett" (did you mean "set"?)`},
		{[]string{"bench", "pubsbu"}, `busbar bench: unknown subcommand "pubsbu" (did you mean "pubsub"?)`},
		{[]string{"frame", "lint"}, `busbar frame: unknown subcommand "lint"`},
		{[]string{"sub", "news", "--count", "many"}, `busbar sub: invalid value "many" for flag --count: parse error`},
		{[]string{"serve", "--tcp"}, `busbar serve: flag needs a value: --tcp`},
		{[]string{"help", "pubb"}, `busbar help: unknown verb "pubb" (did you mean "pub"?)`},
		{[]string{"help", "pub", "x"}, `busbar help: unexpected argument "x"`},
		{[]string{"completion", "tcsh"}, `busbar completion: unknown shell "tcsh" (want bash, zsh or fish)`},
		{[]string{"completion"}, `busbar completion: missing SHELL`},
		{[]string{"version", "x"}, `busbar version: unexpected argument "x"`},
	} {
		code, out, errOut := runEnv(t, nil, "", c.args...)
		if code != exitUsage || out != "" || errOut != c.want+"\n" {
			t.Errorf("busbar %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
}

// TestDoubleDashEndsFlags: after "--" a word that looks like a flag is an
// argument, never an unknown flag.
func TestDoubleDashEndsFlags(t *testing.T) {
	code, out, errOut := runEnv(t, nil, "", "addr", "--", "--nope")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `invalid address "--nope"`) {
		t.Fatalf("addr -- --nope: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestClosestIsATypoOrAPrefix(t *testing.T) {
	words := []string{"pub", "sub", "serve", "state", "send"}
	for in, want := range map[string]string{"pubb": "pub", "srve": "serve", "stat": "state", "se": "send", "x": "", "publish": "", "ser": "serve"} {
		if got := closest(in, words); got != want {
			t.Errorf("closest(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		a, b string
		d    int
	}{{"kitten", "sitting", 3}, {"tpc", "tcp", 1}, {"", "abc", 3}, {"same", "same", 0}} {
		if d := editDistance(c.a, c.b); d != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
}

// Every flag's value is named for what it is (FILE, ADDR, PATTERN…), never
// by its Go type, and an empty list has no "(default [])".
func TestFlagValuesAreNamedForWhatTheyAre(t *testing.T) {
	for _, p := range helpPages {
		_, out, _ := runEnv(t, nil, "", append(strings.Fields(p.path), "--help")...)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "  --") && (strings.HasSuffix(line, " STRING") || strings.HasSuffix(line, " VALUE")) {
				t.Errorf("busbar %s --help: %q names its value by type", p.path, line)
			}
		}
		if strings.Contains(out, "(default [])") {
			t.Errorf("busbar %s --help shows an empty list as a default", p.path)
		}
	}
}
