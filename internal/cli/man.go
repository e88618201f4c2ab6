package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// Manual pages. `busbar man VERB` (also `busbar help --man VERB`) prints
// VERB's page in roff (man(7) macros), rendered from the same helpPages
// and flag sets as `busbar help`, so help stays the one source; `busbar
// man` alone prints busbar(1), the overview. `busbar man --dir DIR`
// writes every page, busbar.1 and busbar-VERB.1, which scripts/release
// packs into each archive's man/man1.
func init() {
	addVerb(runMan, []helpPage{
		{path: "man", args: "[VERB]", summary: "print a manual page in roff (also: busbar help --man VERB)",
			text: `Prints VERB's manual page, its subcommands included, in roff for man(1),
made from the same text as "busbar help VERB"; without VERB, busbar(1),
the overview. --dir writes every page (busbar.1, busbar-VERB.1) into a
directory instead: release archives carry them in man/man1.`,
			exit:    "0  printed or written\n1  a page could not be written\n2  an unknown verb",
			example: "$ busbar man pub | man -l -\n$ busbar man --dir ~/.local/share/man/man1"},
	})
}

// runMan is `busbar man [VERB] | --dir DIR`.
func runMan(args []string, stdio IO) int {
	fs := flag.NewFlagSet("man", flag.ContinueOnError)
	dir := fs.String("dir", "", "write every page (busbar.1, busbar-VERB.1) into `DIR` instead of printing one")
	if !parseFlags(stdio, "man", fs, args) {
		return exitUsage
	}
	switch {
	case *dir != "" && fs.NArg() > 0:
		return usageError(stdio, "man", "--dir writes every page: unexpected argument %q", fs.Arg(0))
	case *dir != "":
		if err := writeManPages(*dir); err != nil {
			fmt.Fprintln(stdio.Stderr, "busbar man:", err)
			return exitFail
		}
		return exitOK
	case fs.NArg() > 1:
		return usageError(stdio, "man", "unexpected argument %q (a verb's page covers its subcommands)", fs.Arg(1))
	case fs.NArg() == 0:
		writeManOverview(stdio.Stdout)
		return exitOK
	}
	verb := fs.Arg(0)
	if _, ok := verbs[verb]; !ok {
		return usageError(stdio, "man", "unknown verb %q%s", verb, suggestWord(verb, verbNames()))
	}
	writeManPage(stdio.Stdout, verb)
	return exitOK
}

// writeManPages writes busbar.1 and busbar-VERB.1 for every verb into dir.
func writeManPages(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, render func(io.Writer)) error {
		var b strings.Builder
		render(&b)
		return os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
	}
	if err := write("busbar.1", writeManOverview); err != nil {
		return err
	}
	for _, v := range verbNames() {
		if err := write("busbar-"+v+".1", func(w io.Writer) { writeManPage(w, v) }); err != nil {
			return err
		}
	}
	return nil
}

// manHeader is a page's .TH line and NAME section. The date is left
// out, so the pages depend on the help text and the version only. No
// hyphenation and a ragged right edge (.nh, .ad l): the text is full of
// paths, flags and file names that must read as typed.
func manHeader(w io.Writer, name, summary string) {
	fmt.Fprintf(w, ".TH %s 1 \"\" \"busbar %s\" \"busbar manual\"\n.nh\n.ad l\n", strings.ToUpper(roffEscape(name)), roffEscape(readBuildInfo().Version))
	fmt.Fprintf(w, ".SH NAME\n%s \\- %s\n", roffEscape(name), roffEscape(summary))
}

// writeManOverview is busbar(1): what `busbar help` says, and a line per
// verb naming its page.
func writeManOverview(w io.Writer) {
	manHeader(w, "busbar", "a message bus for plugins, services and devices")
	fmt.Fprint(w, ".SH SYNOPSIS\n.B busbar\n\\fIVERB\\fR [\\fIarguments\\fR] [\\fIflags\\fR]\n")
	fmt.Fprint(w, ".SH DESCRIPTION\n")
	manText(w, `busbar is the broker, the durable relay and the command line of the busbar
message bus, in one binary. Start a broker with "busbar serve", then in another terminal
run "busbar sub news" and "busbar pub news hello".`)
	fmt.Fprint(w, ".SH VERBS\n")
	for _, v := range verbNames() {
		p, _ := page(v)
		fmt.Fprintf(w, ".TP\n.B busbar %s\n%s; see \\fBbusbar\\-%s\\fR(1).\n", roffEscape(v), roffEscape(capitalize(p.summary)), roffEscape(v))
	}
	fmt.Fprint(w, ".SH EXIT STATUS\n")
	manText(w, exitCommon)
	fmt.Fprint(w, ".SH SEE ALSO\n")
	manText(w, `"busbar help VERB" prints the same pages as text; docs/cli.md is the full guide.`)
}

// writeManPage is busbar-VERB(1): the verb's help page, then each
// subcommand's as a subsection.
func writeManPage(w io.Writer, verb string) {
	p, _ := page(verb)
	manHeader(w, "busbar-"+verb, p.summary)
	fs := flagSetOf(verb)
	fmt.Fprint(w, ".SH SYNOPSIS\n")
	subs := subcommands(verb)
	if len(subs) == 0 {
		fmt.Fprintf(w, ".B busbar %s\n%s\n", roffEscape(verb), roffEscape(synopsisArgs(p, fs)))
	}
	for _, s := range subs {
		sp, _ := page(verb + " " + s)
		fmt.Fprintf(w, ".br\n.B busbar %s %s\n%s\n", roffEscape(verb), roffEscape(s), roffEscape(synopsisArgs(sp, flagSetOf(sp.path))))
	}
	fmt.Fprint(w, ".SH DESCRIPTION\n")
	manText(w, capitalize(p.summary)+".")
	if p.text != "" {
		fmt.Fprint(w, ".PP\n")
		manText(w, p.text)
	}
	manFlags(w, ".SH OPTIONS\n", fs)
	if len(subs) > 0 {
		fmt.Fprint(w, ".SH SUBCOMMANDS\n")
	}
	for _, s := range subs {
		sp, _ := page(verb + " " + s)
		fmt.Fprintf(w, ".SS \"busbar %s %s\"\n", roffEscape(verb), roffEscape(s))
		manText(w, capitalize(sp.summary)+".")
		if sp.text != "" {
			fmt.Fprint(w, ".PP\n")
			manText(w, sp.text)
		}
		manFlags(w, ".PP\nOptions:\n", flagSetOf(sp.path))
		if sp.example != "" {
			fmt.Fprint(w, ".PP\nExamples:\n.PP\n.nf\n.RS\n"+roffLines(sp.example)+".RE\n.fi\n")
		}
	}
	fmt.Fprint(w, ".SH EXIT STATUS\n.nf\n"+roffLines(exitOf(verb))+".fi\n")
	if p.example != "" {
		fmt.Fprint(w, ".SH EXAMPLES\n.nf\n"+roffLines(p.example)+".fi\n")
	}
	fmt.Fprint(w, ".SH SEE ALSO\n\\fBbusbar\\fR(1)\n")
}

// synopsisArgs is what follows "busbar PATH" in a usage line.
func synopsisArgs(p helpPage, fs *flag.FlagSet) string {
	s := p.args
	if fs != nil && hasFlags(fs) {
		s = strings.TrimSpace(s + " [flags]")
	}
	return s
}

// flagSetOf is the flag set of the command at path, recorded by running
// it with --help in capture mode (nothing is printed); nil when it has
// none.
func flagSetOf(path string) *flag.FlagSet {
	ctl := &control{capture: true}
	stdio := IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, ctl: ctl}
	dispatch(append(strings.Fields(path), "--help"), stdio)
	return ctl.flags
}

// manFlags writes fs's flags as a tagged list after head, as writeFlags
// does for the text help.
func manFlags(w io.Writer, head string, fs *flag.FlagSet) {
	if fs == nil || !hasFlags(fs) {
		return
	}
	fmt.Fprint(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		left := "\\fB\\-\\-" + roffEscape(f.Name) + "\\fR"
		if v := valueName(f); v != "" {
			left += " \\fI" + roffEscape(v) + "\\fR"
		}
		_, usage := flag.UnquoteUsage(f)
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		fmt.Fprintf(w, ".TP\n%s\n%s\n", left, roffEscape(usage))
	})
}

// manText writes help text: runs of unindented lines are filled as
// paragraphs, indented lines (tables, lists) are kept as they are, and a
// blank line starts a new paragraph.
func manText(w io.Writer, text string) {
	kept := false
	for _, line := range strings.Split(text, "\n") {
		indented := strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
		switch {
		case strings.TrimSpace(line) == "":
			if kept {
				fmt.Fprint(w, ".fi\n")
				kept = false
			}
			fmt.Fprint(w, ".PP\n")
			continue
		case indented && !kept:
			fmt.Fprint(w, ".nf\n")
			kept = true
		case !indented && kept:
			fmt.Fprint(w, ".fi\n")
			kept = false
		}
		fmt.Fprintln(w, roffLine(line))
	}
	if kept {
		fmt.Fprint(w, ".fi\n")
	}
}

// roffLines is text as lines of roff, each escaped, for a no-fill block.
func roffLines(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		b.WriteString(roffLine(line) + "\n")
	}
	return b.String()
}

// roffLine escapes one line of text: a line that starts with a control
// character (. or ') would be read as a request, so it gets \& before it.
func roffLine(line string) string {
	s := roffEscape(line)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffEscape escapes what roff would interpret in running text: the
// escape character; hyphens, which become \- so that flags read as typed
// (--name, not an en dash); and characters outside ASCII, which become
// \[uXXXX], since roff reads bytes in its own encoding unless told.
func roffEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-':
			b.WriteString(`\-`)
		case r > unicode.MaxASCII:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
