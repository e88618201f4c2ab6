package cli

// pub and sub through the built binary: wildcard subscriptions, the
// output forms of sub (default, --raw, --json), --count and --timeout,
// and pub's lines, summary and exit status.

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSubWildcardAndOutputForms(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	star, starWait := s.background(t, "sub", "orders.*", "--count", "3", "--name", "star")
	plain, plainWait := s.background(t, "sub", "orders.new", "--count", "2", "--name", "plain")
	raw, rawWait := s.background(t, "sub", "orders.>", "--raw", "--count", "4", "--name", "raw")
	js, jsWait := s.background(t, "sub", "shop:*", "--json", "--count", "2", "--name", "js")
	s.waitLs(t, "the four subscribers", func(n []map[string]any) bool {
		return hasNode("star", "subscriptions", "orders.*")(n) && hasNode("plain", "subscriptions", "orders.new")(n) &&
			hasNode("raw", "subscriptions", "orders.>")(n) && hasNode("js", "subscriptions", "shop:*")(n)
	})
	for _, p := range [][2]string{
		{"orders.new", "a"},
		{"orders.new", "line one\nline two"},
		{"orders.old", `"quoted"`},
		{"orders.eu.new", "deep"},
		{"shop:cart", "text"},
		{"shop:bin", "\xff\x00"},
	} {
		if code, out, errOut := s.busbar(t, p[1], "pub", p[0], "-"); code != 0 {
			t.Fatalf("pub %s: exit %d\n%s%s", p[0], code, out, errOut)
		}
	}
	for _, w := range []func() error{starWait, plainWait, rawWait, jsWait} {
		if err := w(); err != nil {
			t.Fatalf("sub: %v\nstar: %s\nplain: %s\nraw: %q\njson: %s", err, star, plain, raw, js)
		}
	}
	// One line per message, whatever the payload; the channel first for a pattern.
	if want := "orders.new a\norders.new \"line one\\nline two\"\norders.old \"\\\"quoted\\\"\"\n"; star.String() != want {
		t.Errorf("sub orders.*:\n%s\nwant:\n%s", star, want)
	}
	if want := "a\n\"line one\\nline two\"\n"; plain.String() != want {
		t.Errorf("sub orders.new:\n%q\nwant:\n%q", plain, want)
	}
	if want := "aline one\nline two\"quoted\"deep"; raw.String() != want {
		t.Errorf("sub --raw:\n%q\nwant:\n%q", raw, want)
	}
	lines := strings.Split(strings.TrimSuffix(js.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("sub --json: %q", js)
	}
	var text, bin map[string]any
	if json.Unmarshal([]byte(lines[0]), &text) != nil || json.Unmarshal([]byte(lines[1]), &bin) != nil {
		t.Fatalf("sub --json: %q", js)
	}
	if text["channel"] != "shop:cart" || text["payload"] != "text" || bin["channel"] != "shop:bin" || bin["payload_base64"] != "/wA=" || bin["payload"] != nil {
		t.Errorf("sub --json: %q", js)
	}

	// A malformed pattern is bad input.
	if code, _, errOut := s.busbar(t, "", "sub", "orders.>.x", "--timeout", "5s"); code == 0 || !strings.Contains(errOut, "orders.>.x") {
		t.Errorf("sub orders.>.x: exit %d: %s", code, errOut)
	}
}

func TestSubTimeout(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	// --timeout also bounds connecting and subscribing: long enough for a
	// busy machine to do both, so the quiet wait is what ends it.
	const quiet = "2s"
	if code, out, errOut := s.busbar(t, "", "sub", "quiet.channel", "--timeout", quiet); code != 0 || out != "" {
		t.Fatalf("sub --timeout without --count: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut := s.busbar(t, "", "sub", "quiet.channel", "--timeout", quiet, "--count", "2")
	if code != exitFail || !strings.Contains(errOut, "0 of 2 messages") {
		t.Fatalf("sub --timeout with --count unmet: exit %d: %s", code, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "sub", "x", "--raw", "--json"); code != exitUsage {
		t.Fatalf("sub --raw --json: exit %d: %s", code, errOut)
	}
}

func TestPubLinesAndExitStatus(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	// Nobody subscribes: exit 1, and the publisher's own line is left out.
	code, out, errOut := s.busbar(t, "", "pub", "news", "hello", "--name", "publisher")
	if code != exitFail || out != "broker NO_SUBSCRIBER\n" {
		t.Fatalf("pub to nobody: exit %d\n%q %s", code, out, errOut)
	}
	code, out, _ = s.busbar(t, "", "pub", "news", "hello", "--name", "publisher", "--verbose")
	if code != exitFail || out != "broker NO_SUBSCRIBER\npublisher NO_SUBSCRIBER\n" {
		t.Fatalf("pub --verbose: exit %d\n%q", code, out)
	}
	sub, subWait := s.background(t, "sub", "news", "--name", "watcher", "--count", "3")
	s.waitLs(t, "the subscriber", hasNode("watcher", "subscriptions", "news"))
	code, out, _ = s.busbar(t, "", "pub", "news", "one", "--name", "publisher")
	if code != exitOK || out != "broker NO_SUBSCRIBER\nwatcher ACCEPTED\n" {
		t.Fatalf("pub to a subscriber: exit %d\n%q", code, out)
	}
	code, out, errOut = s.busbar(t, "", "pub", "news", "two", "--quiet")
	if code != exitOK || out != "" || errOut != "" {
		t.Fatalf("pub --quiet: exit %d %q %q", code, out, errOut)
	}
	// On a terminal a summary line follows.
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("no script(1) to give pub a terminal")
	}
	cmd := exec.Command("script", "-qec", binPath+" pub news three --name publisher", "/dev/null")
	cmd.Env = append(cmd.Environ(), "BUSBAR_DATA="+s.data)
	tty, err := cmd.Output()
	if got := strings.ReplaceAll(string(tty), "\r\n", "\n"); err != nil || got != "broker NO_SUBSCRIBER\nwatcher ACCEPTED\naccepted by 1 of 2 nodes (1 NO_SUBSCRIBER)\n" {
		t.Fatalf("pub on a terminal: %v\n%q", err, got)
	}
	if err := subWait(); err != nil || sub.String() != "one\ntwo\nthree\n" {
		t.Fatalf("sub: %v %q", err, sub)
	}
}
