package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"busbar/auth"
	"busbar/state"
)

// How a verb reads its command line. Every verb parses its flags through
// parseFlags before it does anything else, so that `--help` anywhere
// prints the verb's help (docs/cli.md#help) and a usage error is one line
// on stderr with exit status 2, never a dump of the flag list.

// control is what Main shares with the verb it runs: whether the verb
// printed its help (the exit status is then 0, whatever the verb returns)
// and, for `busbar completion`, the verb's flags instead of the help.
type control struct {
	helped  bool
	capture bool          // record the flag set instead of printing help
	flags   *flag.FlagSet // the flag set recorded in capture mode
}

// helpArg reports whether a reads as a request for help.
func helpArg(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// usageError prints a one-line usage error of the command at path.
func usageError(stdio IO, path, format string, args ...any) int {
	if path != "" {
		path = " " + path
	}
	fmt.Fprintf(stdio.Stderr, "busbar%s: %s\n", path, fmt.Sprintf(format, args...))
	return exitUsage
}

// parseNoArgs is parseFlags for a command without positional arguments.
func parseNoArgs(stdio IO, path string, fs *flag.FlagSet, args []string) bool {
	if !parseFlags(stdio, path, fs, args) {
		return false
	}
	if fs.NArg() > 0 {
		usageError(stdio, path, "unexpected argument %q", fs.Arg(0))
		return false
	}
	return true
}

// parseFlags parses args with fs, the flags of the command at path. On
// --help it prints the command's help to stdout; on an error it prints
// one line. It returns false when the verb must stop (with exitUsage,
// which Main turns into 0 after help).
func parseFlags(stdio IO, path string, fs *flag.FlagSet, args []string) bool {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if name, ok := unknownFlag(fs, args); ok {
		usageError(stdio, path, "unknown flag --%s%s", name, suggestFlag(fs, name))
		return false
	}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return true
	case errors.Is(err, flag.ErrHelp):
		showHelp(stdio, path, fs)
	default:
		usageError(stdio, path, "%s", flagError(err))
	}
	return false
}

// showHelp prints the help of path with fs's flags, or records fs when
// `busbar completion` asked for it.
func showHelp(stdio IO, path string, fs *flag.FlagSet) {
	if stdio.ctl != nil {
		stdio.ctl.helped = true
		if stdio.ctl.capture {
			stdio.ctl.flags = fs
			return
		}
	}
	writeHelp(stdio.Stdout, path, fs)
}

// unknownFlag finds the first flag in args that fs does not define, before
// "--" and skipping the values of flags that take one. The flag package
// would only say "flag provided but not defined: -sever".
func unknownFlag(fs *flag.FlagSet, args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' || a == "-" {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "" || helpArg(a) && fs.Lookup(name) == nil {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			return name, true
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // its value
		}
	}
	return "", false
}

// flagError rewrites the flag package's error in the --flag form the docs
// use.
func flagError(err error) string {
	s := err.Error()
	for _, p := range []struct{ from, to string }{
		{"flag needs an argument: -", "flag needs a value: --"},
		{"bad flag syntax: ", "bad flag syntax: "},
	} {
		if rest, ok := strings.CutPrefix(s, p.from); ok {
			return p.to + rest
		}
	}
	// invalid value "x" for flag -count: parse error
	if i := strings.Index(s, " for flag -"); i >= 0 {
		return s[:i] + " for flag --" + s[i+len(" for flag -"):]
	}
	return s
}

// suggestFlag is " (did you mean --server?)" when fs has a flag close to
// name, else "".
func suggestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := closest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean --%s?)", s)
	}
	return ""
}

// suggestWord is ` (did you mean "pub"?)` when one of words is close to w.
func suggestWord(w string, words []string) string {
	if s := closest(w, words); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// closest is the candidate nearest to w by edit distance, if it is near
// enough to be a typo (at most maxTypo edits, fewer for short words), or
// one w is a prefix of; "" when none is.
func closest(w string, candidates []string) string {
	best, bestD := "", maxTypo+1
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		d := editDistance(w, c)
		if d > len(c)/2 {
			continue
		}
		// On a tie, a candidate w begins wins ("ser": serve, not send).
		if d < bestD || d == bestD && strings.HasPrefix(c, w) && !strings.HasPrefix(best, w) {
			best, bestD = c, d
		}
	}
	if best == "" {
		for _, c := range sorted {
			if len(w) >= 2 && strings.HasPrefix(c, w) {
				return c
			}
		}
	}
	return best
}

// maxTypo is the most edits a word may be from a command or flag name to
// be suggested as what was meant.
const maxTypo = 2

// editDistance is the number of edits between a and b, by byte: an
// insertion, a deletion, a substitution or a swap of two neighbours
// ("tpc" is one edit from "tcp").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// argSpec reads a usage such as "TARGET CHANNEL [PAYLOAD|-]" or "NAME
// --exec CMD": the required positional arguments in order, and how many
// optional ones may follow ("[...]" groups that are not flags). Flags and
// their values are left out.
func argSpec(usage string) (required []string, optional int) {
	depth, afterFlag := 0, false
	for _, tok := range strings.Fields(usage) {
		opens := strings.Count(tok, "[") + strings.Count(tok, "(")
		closes := strings.Count(tok, "]") + strings.Count(tok, ")")
		wasFlag := afterFlag
		afterFlag = false
		switch {
		case depth == 0 && opens > 0:
			if t := strings.TrimLeft(tok, "[("); !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "flags") {
				optional++
			}
		case depth > 0:
		case strings.HasPrefix(tok, "-"):
			afterFlag = true
		case wasFlag:
		default:
			name, _, _ := strings.Cut(tok, "|")
			required = append(required, name)
		}
		depth += opens - closes
	}
	return required, optional
}

// argCountError says what is wrong with args against usage: the first
// missing argument, or the first one too many.
func argCountError(usage string, args []string) string {
	required, optional := argSpec(usage)
	if len(args) < len(required) {
		return "missing " + required[len(args)]
	}
	if n := len(required) + optional; n < len(args) {
		return fmt.Sprintf("unexpected argument %q", args[n])
	}
	return fmt.Sprintf("wrong number of arguments (usage: %s)", usage)
}

// pickSubcommand checks args[0] against the subcommands of path (from the
// help table). It answers help itself: `busbar state`, `busbar state
// --help`, `busbar state help`. ok is false when the caller must return
// code.
func pickSubcommand(stdio IO, path string, args []string) (code int, ok bool) {
	subs := subcommands(path)
	switch {
	case len(args) == 0:
		return usageError(stdio, path, "missing subcommand (%s)", orList(subs)), false
	case helpArg(args[0]) || args[0] == "help":
		showHelp(stdio, path, nil)
		return exitOK, false
	}
	for _, s := range subs {
		if s == args[0] {
			return 0, true
		}
	}
	return usageError(stdio, path, "unknown subcommand %q%s", args[0], suggestWord(args[0], subs)), false
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// checkStateArgs checks a state operation's namespace (its first
// argument) and, for the operations on one entry, its key, before anything
// is sent: an invalid name is bad input (exit 2), not a refusal.
func checkStateArgs(op string, args []string) error {
	if len(args) > 0 {
		if err := state.CheckName(args[0]); err != nil {
			return fmt.Errorf("namespace %q: %w", args[0], err)
		}
	}
	switch op {
	case "get", "set", "del", "open":
		if len(args) > 1 {
			if err := state.CheckKey(args[1]); err != nil {
				return fmt.Errorf("key %q: %w", args[1], err)
			}
		}
	case "owner":
		if len(args) > 1 {
			if err := auth.ValidNodeName(args[1]); err != nil {
				return fmt.Errorf("node %q: %w", args[1], err)
			}
		}
	}
	return nil
}
