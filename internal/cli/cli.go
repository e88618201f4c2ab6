// Package cli implements the busbar command line. cmd/busbar only calls
// Main; keeping the verbs here lets tests run them in-process as well as
// through the built binary.
package cli

import (
	"io"
	"slices"
	"strings"
)

// Exit statuses shared by the verbs.
const (
	exitOK    = 0
	exitFail  = 1 // the verb ran and the answer is "no" (defects, warnings)
	exitUsage = 2 // bad arguments or unusable input
)

// IO is where a verb reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	ctl *control // set by Main: help shown, flags captured
}

// verbOrder is the order `busbar help` lists the verbs in. Each verb's
// flags, help pages and run function are in one file named after it,
// whose init registers them (addVerb).
var verbOrder = []string{
	"serve", "pub", "sub", "send", "req", "reply", "ls", "tap", "status", "state", "principal", "bench", "bedrock",
	"group", "port", "frame", "addr", "id", "durable", "trueseal", "completion", "version", "man", "help",
}

// verbs are the commands' entry points, by name.
var verbs = map[string]func(args []string, io IO) int{}

// addVerb registers a verb from its file's init: run is its entry point,
// pages its help, the verb's own page first, then its subcommands' in the
// order its help lists them. helpPages stays in verbOrder, whatever order
// the files' inits run in.
func addVerb(run func([]string, IO) int, pages []helpPage) {
	name := pages[0].path
	rank := slices.Index(verbOrder, name)
	if rank < 0 || verbs[name] != nil {
		panic("busbar: verb " + name + " is not in verbOrder, or registered twice")
	}
	verbs[name] = run
	at := slices.IndexFunc(helpPages, func(p helpPage) bool {
		verb, _, _ := strings.Cut(p.path, " ")
		return slices.Index(verbOrder, verb) > rank
	})
	if at < 0 {
		at = len(helpPages)
	}
	helpPages = slices.Insert(helpPages, at, pages...)
}

// Main runs the command line with args (without the program name) and
// returns the process exit status.
func Main(args []string, stdio IO) int {
	stdio.ctl = &control{}
	return dispatch(args, stdio)
}

func dispatch(args []string, stdio IO) int {
	if len(args) == 0 {
		writeOverview(stdio.Stderr)
		return exitUsage
	}
	switch a := args[0]; {
	case helpArg(a):
		writeOverview(stdio.Stdout)
		return exitOK
	case a == "--version" || a == "-version" || a == "-V":
		return runVersion(args[1:], stdio)
	}
	run, ok := verbs[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return usageError(stdio, "", "unknown flag %s before the verb (usage: busbar VERB [arguments] [flags])", args[0])
		}
		return usageError(stdio, "", "unknown verb %q%s", args[0], suggestWord(args[0], verbNames()))
	}
	code := run(args[1:], stdio)
	if stdio.ctl.helped {
		return exitOK
	}
	return code
}
