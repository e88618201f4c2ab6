package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"busbar/client"
	"busbar/wire"
)

func init() {
	addVerb(runSend, []helpPage{
		{path: "send", args: "TARGET CHANNEL [PAYLOAD|-]", summary: "send an event to one node and print its receipt",
			text: `Sends an event on CHANNEL to TARGET (a node, service.node, or a service
name the registry resolves) and prints the receipt on stdout:
"RESULT id=ID node=NODE [reason=...]", RESULT being ACCEPTED (queued for the
node's subscriber), NO_SUBSCRIBER, NOT_CONNECTED (no node of that name),
BACKPRESSURED (a queue on the way was full), REJECTED, TIMED_OUT or FAILED.
PAYLOAD: - reads stdin; none: empty.`,
			exit: `0  ACCEPTED
1  any other receipt (printed on stdout), or no connection
2  usage: a bad argument, channel, target or flag (nothing was sent)`,
			example: "$ busbar send cli-4242 news hi\nACCEPTED id=5f0c… node=cli-4242.bus"},
	})
}

func runSend(args []string, stdio IO) int {
	v := newVerb("send", func(n int) bool { return n == 2 || n == 3 }, stdio)
	asJSON := v.fs.Bool("json", false, `print the receipt as one JSON object: {"node","result","id","rc","error","elapsed"} (elapsed in milliseconds)`)
	return v.call(args, stdio, 2, func(c *client.Client, ctx context.Context, payload []byte) int {
		start := time.Now()
		r, err := c.Scope("cli").Channel(v.arg(1)).Send(ctx, v.arg(0), payload)
		if err != nil { // no receipt: refused before sending, or the scope closed
			if *asJSON {
				printCallJSON(stdio.Stdout, errorJSON(err, v.arg(0), start))
			}
			return v.fail(stdio, err, exitFail)
		}
		if *asJSON {
			printCallJSON(stdio.Stdout, callJSON{Node: strings.TrimSuffix(r.Node, ".bus"), Result: string(r.Result), ID: r.ID, Error: r.Reason, Elapsed: sinceMS(start)})
		} else {
			fmt.Fprintf(stdio.Stdout, "%s id=%s node=%s", r.Result, r.ID, r.Node)
			if r.Reason != "" {
				fmt.Fprintf(stdio.Stdout, " reason=%q", r.Reason)
			}
			fmt.Fprintln(stdio.Stdout)
		}
		if r.Result != wire.Accepted {
			return exitFail
		}
		return exitOK
	})
}
