package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"busbar/bedrock"
	"busbar/bedrock/bridge"
)

func init() {
	addVerb(runBedrock, []helpPage{
		{path: "bedrock", summary: "join a bedrock add-on world on stdin/stdout to the broker",
			text: `The bedrock bus over a size-capped broadcast medium, bridged to busbar
(docs/bedrock.md). stdout is the medium; logs go to stderr.`,
			exit:    exitCommon,
			example: "$ busbar bedrock bridge --medium stdio --export-state home"},
		{path: "bedrock bridge", summary: "run the bridge until the medium closes or a signal",
			text:    "Reads the medium's lines on stdin, writes them on stdout, and joins them to the broker.",
			example: "$ busbar bedrock bridge --medium stdio --export-events news"},
	})
}

// runBedrock is `busbar bedrock bridge`: join a bedrock world on a medium
// to the broker (package bedrock/bridge).
func runBedrock(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "bedrock", args); !ok {
		return code
	}
	v := newVerb("bedrock bridge", func(n int) bool { return n == 0 }, stdio)
	medium := v.fs.String("medium", "stdio", "the medium: stdio (one message per line on stdin and stdout)")
	addonID := v.fs.String("addon-id", bridge.ServiceName, "the bridge's add-on id (src) on the medium")
	exportState := v.fs.String("export-state", "", "busbar namespaces to mirror onto the medium (comma-separated)")
	exportEvents := v.fs.String("export-events", "", "busbar channels whose events go onto the medium (comma-separated)")
	logLevel := v.fs.String("log-level", "info", "log level on stderr: debug, info, warn, error")
	if !v.parse(args[1:]) {
		return exitUsage
	}
	if *medium != "stdio" {
		fmt.Fprintf(stdio.Stderr, "busbar bedrock bridge: unknown medium %q (stdio is the one there is)\n", *medium)
		return exitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar bedrock bridge: --log-level:", err)
		return exitUsage
	}
	// stdout is the medium: everything else goes to stderr.
	log := slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: lvl}))
	c, ctx, done, err := v.session(stdio, true)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	lines := bedrock.NewLineMedium(stdio.Stdin, stdio.Stdout)
	clock := bedrock.NewRealClock()
	defer clock.Close()
	bus, err := bedrock.New(bedrock.Options{SelfID: *addonID, Medium: lines, Clock: clock})
	if err != nil {
		return v.fail(stdio, err, exitUsage)
	}
	br, err := bridge.New(ctx, bridge.Options{Client: c, Bus: bus, Logger: log,
		ExportState: splitList(*exportState), ExportEvents: splitList(*exportEvents)})
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer br.Close()
	log.Info("bridge running", "node", c.Node(), "addon-id", *addonID)
	ended := make(chan error, 1)
	go func() { ended <- lines.Wait() }()
	select {
	case <-ctx.Done(): // interrupted
	case err := <-ended: // the medium closed
		if err != nil {
			return v.fail(stdio, err, exitFail)
		}
	case <-c.Done():
		return v.fail(stdio, c.Err(), exitFail)
	}
	return exitOK
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
