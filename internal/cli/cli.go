// Package cli implements the busbar command line. cmd/busbar only calls
// Main; keeping the verbs here lets tests run them in-process as well as
// through the built binary.
package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"

	"busbar/wire"
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
}

type verb struct {
	summary string
	run     func(args []string, io IO) int
}

var verbs map[string]verb

func init() {
	verbs = map[string]verb{
		"serve":   {"run the broker (defaults: ~/.local/state/busbar, unix socket, 127.0.0.1:7474)", runServe},
		"pub":     {"publish an event: one line per candidate node", runPub},
		"sub":     {"print events received on a channel", runSub},
		"send":    {"send an event to one node and print the receipt", runSend},
		"req":     {"send a request and print the reply", runReq},
		"reply":   {"answer requests on a channel (--echo or --exec CMD)", runReply},
		"ls":      {"list nodes with their leases, subscriptions and handlers (--services: the registry)", runLs},
		"tap":     {"print the traffic the broker routes (needs the tap permission; docs/operations.md)", runTap},
		"state":   {"replicated state: get NS KEY, set NS KEY JSON, del NS KEY, open NS KEY, dump [NS], watch NS", runState},
		"bench":   {"generate load and measure it: pub, sub, pubsub, req", runBench},
		"bedrock": {"bedrock bridge: join a bedrock add-on world on stdin/stdout to the broker", runBedrock},
		"group":   {"durable groups of this device: create, invite, join, show, leave, revoke", runGroup},
		"port":    {"cosmix-style ports: serve NAME --exec CMD, call NAME|PATH COMMAND [ARGS], ls", runPort},
		"frame":   {"parse or validate a text frame read on stdin", runFrame},
		"addr":    {"parse a bus address or target and print it as JSON", runAddr},
		"id":      {"this device's identity for durable delivery: init, show", runID},
		"durable": {"durable, end-to-end-sealed delivery: send GROUP [BODY|-], listen GROUP, status", runDurable},
		"version": {"print the version", runVersion},
		"help":    {"show this help", runHelp},
	}
}

// Main runs the command line with args (without the program name) and
// returns the process exit status.
func Main(args []string, io IO) int {
	if len(args) == 0 {
		usage(io.Stderr)
		return exitUsage
	}
	v, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintf(io.Stderr, "busbar: unknown command %q\n\n", args[0])
		usage(io.Stderr)
		return exitUsage
	}
	return v.run(args[1:], io)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: busbar <command> [arguments]\n\ncommands:")
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, verbs[n].summary)
	}
}

func runHelp(_ []string, io IO) int {
	usage(io.Stdout)
	return exitOK
}

// Version returns the module version and VCS revision the binary was built
// from, as far as the build recorded them.
func Version() string {
	v, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return v + rev
}

func runVersion(args []string, io IO) int {
	if len(args) != 0 {
		fmt.Fprintln(io.Stderr, "usage: busbar version")
		return exitUsage
	}
	fmt.Fprintf(io.Stdout, "busbar %s (protocol %s, %s)\n", Version(), wire.ProtocolVersion, runtime.Version())
	return exitOK
}
