package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"busbar/client"
	"busbar/wire"
)

func init() {
	addVerb(runPub, []helpPage{
		{path: "pub", args: "CHANNEL [PAYLOAD|-]", summary: "publish an event to a channel's subscribers: one line per candidate node",
			text: `Publishes an event on CHANNEL and prints, one line each and sorted by node,
what became of it at every candidate node (every connected node permitted
to receive CHANNEL, the broker included): "NODE RESULT", where RESULT is
  ACCEPTED       queued for the node's subscriber
  NO_SUBSCRIBER  the node has no subscription to CHANNEL
  BACKPRESSURED  a queue on the way to the node was full: not delivered
  TIMED_OUT      the node did not answer before --timeout
  NOT_CONNECTED  the node left before the event reached it
  REJECTED       the node may not receive on CHANNEL
  FAILED         unknown, e.g. the node left before answering
The publisher's own line only with --verbose; on a terminal a summary line
follows (accepted by N of M nodes). PAYLOAD is the event's body (- reads
it from stdin; none: empty).

` + connNote,
			exit: `0  at least one node accepted the event
1  no node accepted it (nobody listens, or every candidate refused or timed
   out), or it failed (no broker, refused login)
2  usage: a bad argument, flag or input (nothing was sent)
4, 5, 7  the broker refused the whole publication, as for req (OVERLOAD,
   TIMEOUT, REJECTED)`,
			example: "$ busbar pub news hello\ncli-4242 ACCEPTED"},
	})
}

func runPub(args []string, stdio IO) int {
	v := newVerb("pub", func(n int) bool { return n == 1 || n == 2 }, stdio)
	quiet := v.fs.Bool("quiet", false, "print nothing; the exit status says whether any node accepted")
	verbose := v.fs.Bool("verbose", false, "also print the publisher's own node")
	asJSON := v.fs.Bool("json", false, `print one JSON object per candidate node: {"node","result","id","rc","error","elapsed"} (elapsed in milliseconds)`)
	return v.call(args, stdio, 1, func(c *client.Client, ctx context.Context, payload []byte) int {
		start := time.Now()
		res, err := c.Scope("cli").Channel(v.arg(0)).Publish(ctx, payload)
		if err != nil {
			if *asJSON {
				printCallJSON(stdio.Stdout, errorJSON(err, "", start))
			}
			return v.failCall(stdio, err)
		}
		switch {
		case *asJSON:
			elapsed := sinceMS(start)
			for _, r := range res.Results {
				if r.Node != c.Node() || *verbose {
					printCallJSON(stdio.Stdout, callJSON{Node: r.Node, Result: string(r.Result), ID: res.ID, Elapsed: elapsed})
				}
			}
		case !*quiet:
			printPublished(stdio.Stdout, res, c.Node(), *verbose, isTerminal(stdio.Stdout))
		}
		if publishAccepted(res) == 0 {
			return exitFail
		}
		return exitOK
	})
}

// publishAccepted counts the nodes that accepted a publication.
func publishAccepted(res client.PublishResult) int {
	n := 0
	for _, r := range res.Results {
		if r.Result == wire.Accepted {
			n++
		}
	}
	return n
}

// printPublished prints one line per candidate node, NODE RESULT; the
// publisher's own node (a candidate too, which never receives what it
// publishes unless it subscribes) only when verbose. On a terminal a
// summary line follows.
func printPublished(w io.Writer, res client.PublishResult, self string, verbose, summary bool) {
	counts := map[wire.Result]int{}
	var order []wire.Result
	shown := 0
	for _, r := range res.Results {
		if r.Node == self && !verbose {
			continue
		}
		fmt.Fprintf(w, "%s %s\n", r.Node, r.Result)
		if counts[r.Result] == 0 {
			order = append(order, r.Result)
		}
		counts[r.Result]++
		shown++
	}
	if !summary {
		return
	}
	var parts []string
	for _, r := range order {
		if r != wire.Accepted {
			parts = append(parts, fmt.Sprintf("%d %s", counts[r], r))
		}
	}
	line := fmt.Sprintf("accepted by %d of %d nodes", counts[wire.Accepted], shown)
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	fmt.Fprintln(w, line)
}
