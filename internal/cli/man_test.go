package cli

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// manMacros are the roff requests the pages use; any other line that
// starts with a control character is text that escaped its escaping.
var manMacros = map[string]bool{"TH": true, "SH": true, "SS": true, "PP": true, "TP": true, "B": true,
	"br": true, "nf": true, "fi": true, "RS": true, "RE": true, "nh": true, "ad": true}

// Every verb's manual page is roff made from its help: the header and
// sections man(7) expects, the summary as its NAME, every subcommand and
// every flag of the help, and no line roff would misread. `busbar help
// --man VERB` is the same page.
func TestEveryVerbHasAManualPageMadeFromItsHelp(t *testing.T) {
	for _, verb := range verbNames() {
		t.Run(verb, func(t *testing.T) {
			code, out, errOut := run(t, "", "man", verb)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			p, _ := page(verb)
			checkRoff(t, out, "busbar-"+verb, p.summary)
			for _, s := range subcommands(verb) {
				if !strings.Contains(out, `.SS "busbar `+roffEscape(verb+" "+s)+`"`) {
					t.Errorf("no section for subcommand %s", s)
				}
				wantFlags(t, out, flagSetOf(verb+" "+s))
			}
			wantFlags(t, out, flagSetOf(verb))
			if _, again, _ := run(t, "", "help", "--man", verb); again != out {
				t.Error("busbar help --man differs from busbar man")
			}
		})
	}
	code, out, _ := run(t, "", "man")
	if code != 0 {
		t.Fatalf("busbar man: exit %d", code)
	}
	checkRoff(t, out, "busbar", "a message bus for plugins, services and devices")
	for _, verb := range verbNames() {
		if !strings.Contains(out, `\fBbusbar\-`+roffEscape(verb)+`\fR(1)`) {
			t.Errorf("busbar(1) does not name busbar-%s(1)", verb)
		}
	}
}

// checkRoff checks a page's structure, and asks groff, where there is
// one, to format it with every warning on.
func checkRoff(t *testing.T, page, name, summary string) {
	t.Helper()
	if !strings.HasPrefix(page, ".TH "+strings.ToUpper(roffEscape(name))+" 1 ") {
		t.Errorf("no .TH %s line first: %.80q", name, page)
	}
	want := ".SH NAME\n" + roffEscape(name) + ` \- ` + roffEscape(summary) + "\n"
	if !strings.Contains(page, want) {
		t.Errorf("NAME is not %q", want)
	}
	for _, sh := range []string{"SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"} {
		if !strings.Contains(page, "\n.SH "+sh+"\n") {
			t.Errorf("no %s section", sh)
		}
	}
	for i, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			if req, _, _ := strings.Cut(line[1:], " "); !manMacros[req] {
				t.Errorf("line %d is read as a request: %q", i+1, line)
			}
		}
		for _, r := range line {
			if r > 127 {
				t.Errorf("line %d is not ASCII: %q", i+1, line)
				break
			}
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		return // the structure above is what can be checked without it
	}
	cmd := exec.Command(groff, "-man", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("groff -man -ww: %v\n%s", err, stderr.String())
	}
}

// wantFlags checks that every flag of fs has its item in the page.
func wantFlags(t *testing.T, page string, fs *flag.FlagSet) {
	t.Helper()
	if fs == nil {
		return
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(page, ".TP\n\\fB\\-\\-"+roffEscape(f.Name)+"\\fR") {
			t.Errorf("no item for --%s", f.Name)
		}
	})
}

// busbar man --dir writes busbar.1 and a page per verb, the same pages
// busbar man prints.
func TestManDirWritesEveryPage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	if code, _, errOut := run(t, "", "man", "--dir", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	names := []string{"busbar.1"}
	for _, v := range verbNames() {
		names = append(names, "busbar-"+v+".1")
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != len(names) {
		t.Fatalf("%d files, want %d: %v", len(entries), len(names), err)
	}
	for _, n := range names {
		got, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"man"}
		if v := strings.TrimSuffix(strings.TrimPrefix(n, "busbar-"), ".1"); n != "busbar.1" {
			args = append(args, v)
		}
		if _, want, _ := run(t, "", args...); string(got) != want {
			t.Errorf("%s differs from busbar %s", n, strings.Join(args, " "))
		}
	}
	if code, _, errOut := run(t, "", "man", "nope"); code != exitUsage || !strings.Contains(errOut, `unknown verb "nope"`) {
		t.Errorf("busbar man nope: exit %d %q", code, errOut)
	}
}
