package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpPage is the help of one command: a verb ("pub") or a subcommand
// ("state set"). `busbar PATH --help` and `busbar help PATH` print it.
type helpPage struct {
	path    string // "pub", "state set"
	args    string // the positional part of the usage line
	summary string // one line, for the lists
	text    string // what it does, its arguments, what its output means
	exit    string // exit statuses; "" inherits the parent command's
	example string // one or two "$ busbar …" lines, with output
}

// Exit statuses every command shares, and those of the client verbs.
const (
	exitCommon = `0  done
1  the command ran and the answer is "no", or it failed (no broker, refused login)
2  usage: a bad argument, flag or input (nothing was sent)`
	exitCall = exitCommon + `
3  NO_HANDLER: nobody handles it (or the target is not connected)
4  OVERLOAD: the broker or the handler had no room
5  TIMEOUT: no answer within --timeout
6  DISCONNECT: the connection went while waiting
7  REJECTED: not permitted, or refused (also AMBIGUOUS: a bare name several instances announce)`
	connNote = `With ` + "`busbar serve`" + ` running on its defaults, no flag is needed: the
client finds its socket and credentials in the data directory.`
)

// helpPages lists every command in the order `busbar help` shows them; a
// parent's subcommands follow it. Each verb's file adds its own (addVerb).
var helpPages []helpPage

// page finds the help page of path.
func page(path string) (helpPage, bool) {
	for _, p := range helpPages {
		if p.path == path {
			return p, true
		}
	}
	return helpPage{}, false
}

// subcommands are the subcommands of path, in help order.
func subcommands(path string) []string {
	var out []string
	for _, p := range helpPages {
		if rest, ok := strings.CutPrefix(p.path, path+" "); ok && !strings.Contains(rest, " ") {
			out = append(out, rest)
		}
	}
	return out
}

// verbNames are the top-level commands, in help order.
func verbNames() []string {
	var out []string
	for _, p := range helpPages {
		if !strings.Contains(p.path, " ") {
			out = append(out, p.path)
		}
	}
	return out
}

// writeOverview is `busbar help`.
func writeOverview(w io.Writer) {
	fmt.Fprint(w, `busbar: a message bus for plugins, services and devices: the broker, the
durable relay and the command line, in one binary.

usage: busbar VERB [arguments] [flags]

verbs:
`)
	for _, name := range verbNames() {
		p, _ := page(name)
		fmt.Fprintf(w, "  %-10s %s\n", name, p.summary)
	}
	fmt.Fprint(w, `
Start a broker with "busbar serve", then in another terminal:
  busbar sub news            busbar pub news hello

"busbar help VERB" or "busbar VERB --help" explains a verb;
"busbar --version" prints the version. Full guide: docs/cli.md.
`)
}

// writeHelp prints the help page of path; fs, when not nil, supplies the
// flags.
func writeHelp(w io.Writer, path string, fs *flag.FlagSet) {
	if path == "" {
		writeOverview(w)
		return
	}
	p, ok := page(path)
	if !ok { // every command has a page (a test checks): never reached
		p = helpPage{path: path}
	}
	subs := subcommands(path)
	usage := "busbar " + path
	if len(subs) > 0 {
		usage += " SUBCOMMAND [arguments]"
	}
	if p.args != "" {
		usage += " " + p.args
	}
	if fs != nil && hasFlags(fs) {
		usage += " [flags]"
	}
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", usage, capitalize(p.summary))
	if p.text != "" {
		fmt.Fprintf(w, "\n%s\n", p.text)
	}
	if len(subs) > 0 {
		fmt.Fprintln(w, "\nSubcommands:")
		for _, s := range subs {
			sp, _ := page(path + " " + s)
			fmt.Fprintf(w, "  %-9s %s\n", s, sp.summary)
		}
		fmt.Fprintf(w, "\n\"busbar %s SUBCOMMAND --help\" explains one.\n", path)
	}
	if fs != nil && hasFlags(fs) {
		fmt.Fprintln(w, "\nFlags:")
		writeFlags(w, fs)
	}
	fmt.Fprintf(w, "\nExit status:\n%s\n", indent(exitOf(path)))
	if p.example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", indent(p.example))
	}
}

// exitOf is the exit statuses of path, or of the nearest parent that says.
func exitOf(path string) string {
	for {
		if p, ok := page(path); ok && p.exit != "" {
			return p.exit
		}
		i := strings.LastIndex(path, " ")
		if i < 0 {
			return exitCommon
		}
		path = path[:i]
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// writeFlags lists fs's flags as the docs write them: --name VALUE.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		left := "--" + f.Name
		if v := valueName(f); v != "" {
			left += " " + v
		}
		_, usage := flag.UnquoteUsage(f)
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		fmt.Fprintf(w, "  %s\n%s\n", left, wrap(usage, "      ", helpWidth))
	})
}

// helpWidth is the column a flag's description is wrapped at.
const helpWidth = 80

// wrap breaks s into lines of at most width columns (a longer word stays
// whole), each starting with prefix.
func wrap(s, prefix string, width int) string {
	var b strings.Builder
	line := prefix
	for _, word := range strings.Fields(s) {
		if line != prefix && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = prefix
		}
		if line != prefix {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// valueNames name a flag's value by the flag, where its type says too
// little ("string").
var valueNames = map[string]string{
	"data": "DIR", "device": "DIR", "server": "URL[,URL...]", "credentials": "FILE", "name": "NAME",
	"exec": "CMD", "principals": "FILE", "tls-cert": "FILE", "tls-key": "FILE", "unix": "PATH",
	"tcp": "ADDR", "tls": "ADDR", "nats": "URL[,URL...]", "nats-creds": "FILE", "nats-tls-ca": "FILE",
	"nats-tls-cert": "FILE", "nats-tls-key": "FILE", "log-level": "LEVEL", "label": "LABEL",
	"service": "NAME", "version": "VERSION", "target": "TARGET", "medium": "MEDIUM",
	"command": "NAME=DESCRIPTION", "announce": "SERVICE", "app": "NAME", "ca": "FILE",
	"nats-prefix": "PREFIX", "addon-id": "ID", "export-state": "NS[,NS...]", "export-events": "CHANNEL[,CHANNEL...]",
	"config": "FILE", "http": "ADDR", "http-unix": "PATH", "https": "ADDR", "nats-relays": "NAME[,NAME...]", "ws-origin": "ORIGIN[,ORIGIN...]",
	"out": "FILE", "nodes": "NAME[,NAME...]", "node": "NODE[,NODE...]",
	"send": "PATTERN[,...]", "request": "PATTERN[,...]", "publish": "PATTERN[,...]", "subscribe": "PATTERN[,...]",
	"handle": "PATTERN[,...]", "tap": "PATTERN[,...]", "state-read": "PATTERN[,...]", "state-write": "PATTERN[,...]",
	"state-admin": "PATTERN[,...]", "nats-bus-key": "FILE", "group": "GROUP", "queue": "QUEUE",
	"moonbridge": "ADDR", "moonbridge-proxy": "NODE", "moonbridge-allow-hosts": "HOST[,HOST...]",
	"trueseal": "ADDR[,ADDR]", "trueseal-key": "FILE", "cosmix-socket": "PATH",
}

func valueName(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	kind, _ := flag.UnquoteUsage(f)
	if strings.Count(f.Usage, "`") >= 2 {
		return kind // the flag names its value itself: `URL` (status --http, beside serve's --http ADDR)
	}
	if v, ok := valueNames[f.Name]; ok {
		return v
	}
	switch kind {
	case "duration":
		return "DURATION"
	case "int", "uint", "int64", "uint64":
		return "N"
	case "float":
		return "X"
	case "":
		return "VALUE"
	default:
		return strings.ToUpper(kind)
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
func init() {
	addVerb(runHelp, []helpPage{
		{path: "help", args: "[VERB [SUBCOMMAND]]", summary: "show the help of busbar or of a verb",
			text: "Same as busbar VERB --help; busbar help --man VERB prints it as a manual page.", exit: "0  printed\n2  an unknown verb", example: "$ busbar help pub"},
	})
}

// runHelp is `busbar help [COMMAND [SUBCOMMAND]]`: the command's own
// --help.
func runHelp(args []string, stdio IO) int {
	if len(args) == 0 {
		writeOverview(stdio.Stdout)
		return exitOK
	}
	if helpArg(args[0]) {
		showHelp(stdio, "help", nil)
		return exitOK
	}
	if args[0] == "--man" { // the same page as roff
		return runMan(args[1:], stdio)
	}
	if _, ok := verbs[args[0]]; !ok {
		return usageError(stdio, "help", "unknown verb %q%s", args[0], suggestWord(args[0], verbNames()))
	}
	if len(args) > 2 || len(args) == 2 && len(subcommands(args[0])) == 0 {
		return usageError(stdio, "help", "unexpected argument %q", args[len(args)-1])
	}
	return dispatch(append(append([]string(nil), args...), "--help"), stdio)
}
