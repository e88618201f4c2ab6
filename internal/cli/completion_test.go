package cli

// `busbar completion SHELL`: each script parses in its shell and completes
// verbs, subcommands and flags when its function is called as the shell
// would. A shell that is not installed is skipped, saying so.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// completionScript writes `busbar completion sh` to a file.
func completionScript(t *testing.T, sh string) string {
	t.Helper()
	code, out, errOut := runEnv(t, nil, "", "completion", sh)
	if code != 0 || errOut != "" || out == "" {
		t.Fatalf("completion %s: exit %d, stderr %q", sh, code, errOut)
	}
	path := filepath.Join(t.TempDir(), "busbar."+sh)
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func shell(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed", name)
	}
	return path
}

// completes runs script in sh and compares its output lines.
func completes(t *testing.T, sh string, args []string, want string) {
	t.Helper()
	out, err := exec.Command(sh, args...).CombinedOutput()
	if err != nil || string(out) != want {
		t.Errorf("%s %q: %v\ngot:\n%swant:\n%s", sh, args, err, out, want)
	}
}

func TestCompletionBash(t *testing.T) {
	bash := shell(t, "bash")
	script := completionScript(t, "bash")
	completes(t, bash, []string{"-n", script}, "")
	call := func(words ...string) string {
		return "source " + script + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
			string(rune('0'+len(words)-1)) + "; _busbar; echo \"${COMPREPLY[*]}\""
	}
	completes(t, bash, []string{"-c", call("busbar", "pu")}, "pub\n")
	completes(t, bash, []string{"-c", call("busbar", "state", "s")}, "set\n")
	completes(t, bash, []string{"-c", call("busbar", "bench", "pubsub", "--su")}, "--subs\n")
	completes(t, bash, []string{"-c", call("busbar", "pub", "news", "--se")}, "--server\n")
	completes(t, bash, []string{"-c", call("busbar", "serve", "--tl")}, "--tls --tls-cert --tls-key\n")
}

func TestCompletionZsh(t *testing.T) {
	zsh := shell(t, "zsh")
	script := completionScript(t, "zsh")
	completes(t, zsh, []string{"-n", script}, "")
	// compadd and _files stand in for the completion system: the script's
	// own logic picks what is offered; compadd filters by PREFIX itself.
	stub := `compadd() { [[ $1 == -- ]] && shift; print -r -- "$@"; }; _files() { print FILES; }; source ` + script + `; `
	completes(t, zsh, []string{"-c", stub + "words=(busbar pu); CURRENT=2; PREFIX=pu; _busbar"},
		strings.Join(append(verbNames(), "--help", "--version"), " ")+"\n")
	completes(t, zsh, []string{"-c", stub + "words=(busbar frame p); CURRENT=3; PREFIX=p; _busbar"}, "parse validate\n")
	completes(t, zsh, []string{"-c", stub + "words=(busbar frame parse --s); CURRENT=4; PREFIX=--s; _busbar"}, "--lenient --strict --help\n")
	completes(t, zsh, []string{"-c", stub + "words=(busbar pub news); CURRENT=3; PREFIX=n; _busbar"}, "FILES\n")
}

func TestCompletionFish(t *testing.T) {
	fish := shell(t, "fish")
	script := completionScript(t, "fish")
	completes(t, fish, []string{"-n", script}, "")
	complete := func(line string) []string {
		out, err := exec.Command(fish, "-c", "source "+script+"; complete -C '"+line+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("fish complete %q: %v %s", line, err, out)
		}
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, _, _ := strings.Cut(l, "\t")
			names = append(names, name)
		}
		return names
	}
	for line, want := range map[string]string{
		"busbar pu":               "pub",
		"busbar state s":          "set",
		"busbar pub news --se":    "--server",
		"busbar frame parse --st": "--strict",
	} {
		if got := complete(line); len(got) != 1 || got[0] != want {
			t.Errorf("fish completes %q as %q, want [%s]", line, got, want)
		}
	}
}
