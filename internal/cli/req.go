package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"busbar/auth"
	"busbar/client"
)

func init() {
	addVerb(runReq, []helpPage{
		{path: "req", args: "TARGET CHANNEL [PAYLOAD|-]", summary: "send a request and print the reply",
			text: `Sends a request on CHANNEL to TARGET's handler (a node, service.node, or a
service name) and prints the reply's body on stdout (with a newline after
it on a terminal). The error of a failed request goes to stderr, with the
rc the reply carried; the exit status says which kind it was.
PAYLOAD: - reads stdin; none: empty.`,
			exit: exitCall + `
8  HANDLER_FAILED: the handler answered with an error
9  NOT_CONNECTED: a MoonBridge backend's handler found what it needed not connected
10 PROTOCOL_ERROR: a MoonBridge backend broke its protocol answering`,
			example: "$ busbar req upper math shout\nSHOUT"},
	})
}

func runReq(args []string, stdio IO) int {
	v := newVerb("req", func(n int) bool { return n == 2 || n == 3 }, stdio)
	asJSON := v.fs.Bool("json", false, `print the outcome as one JSON object: {"node","result","id","rc","error","elapsed"} and the reply's payload (elapsed in milliseconds)`)
	v.check = func() error { return reqArgOrder(v.args) }
	return v.call(args, stdio, 2, func(c *client.Client, ctx context.Context, payload []byte) int {
		start := time.Now()
		reply, err := c.Scope("cli").Channel(v.arg(1)).Request(ctx, v.arg(0), payload)
		if err != nil {
			if *asJSON {
				printCallJSON(stdio.Stdout, errorJSON(err, v.arg(0), start))
			}
			return v.failCall(stdio, err)
		}
		if *asJSON {
			j := callJSON{Node: strings.TrimSuffix(reply.From(), ".bus"), Result: "OK", ID: reply.ReplyTo(), Elapsed: sinceMS(start)}
			j.Payload, j.PayloadBase64 = payloadJSON(reply.Payload())
			printCallJSON(stdio.Stdout, j)
			return exitOK
		}
		out := reply.Payload()
		_, _ = stdio.Stdout.Write(out)
		if len(out) > 0 && out[len(out)-1] != '\n' && isTerminal(stdio.Stdout) {
			fmt.Fprintln(stdio.Stdout) // the prompt on a line of its own; a pipe gets the bytes as they are
		}
		return exitOK
	})
}

// reqArgOrder checks req's CHANNEL before connecting. Two arguments of
// which only the first is a channel are most likely NATS's order
// (`nats req SUBJECT PAYLOAD`): the error then spells out busbar's order
// with the user's own words in it.
func reqArgOrder(args []string) error {
	err := auth.ValidChannel(args[1])
	if err == nil {
		return nil
	}
	if len(args) == 2 && auth.ValidChannel(args[0]) == nil {
		return &inputError{fmt.Errorf("%w; busbar req takes TARGET CHANNEL [PAYLOAD], naming who answers (unlike nats req SUBJECT PAYLOAD): "+
			"for a request on channel %s carrying that payload, run busbar req TARGET %s %s, where TARGET is a node or service handling %s (busbar ls lists them)",
			err, args[0], args[0], shellQuote(args[1]), args[0])}
	}
	return &inputError{fmt.Errorf("%w (busbar req takes TARGET CHANNEL [PAYLOAD])", err)}
}

// shellQuote is s as one POSIX shell word.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
