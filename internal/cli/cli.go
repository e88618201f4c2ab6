// Package cli implements the busbar command line. cmd/busbar only calls
// Main; keeping the verbs here lets tests run them in-process as well as
// through the built binary.
package cli

import (
	"io"
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

// verbs are the commands' entry points; their summaries and help are in
// helpPages (help.go).
var verbs map[string]func(args []string, io IO) int

func init() {
	verbs = map[string]func([]string, IO) int{
		"serve": runServe, "pub": runPub, "sub": runSub, "send": runSend, "req": runReq,
		"reply": runReply, "ls": runLs, "status": runStatus, "tap": runTap, "state": runState, "principal": runPrincipal, "bench": runBench, "bedrock": runBedrock,
		"group": runGroup, "port": runPort, "frame": runFrame, "addr": runAddr, "id": runID,
		"durable": runDurable, "completion": runCompletion, "version": runVersion, "man": runMan, "help": runHelp,
	}
	verbs["trueseal"] = runTrueseal
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
