package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"busbar/client"
	"busbar/wire"
)

// listFlag is a flag that may be given several times, or as a comma list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
func init() {
	addVerb(runTap, []helpPage{
		{path: "tap", args: "[CHANNEL-PATTERN...]", summary: "print the traffic the broker routes (needs the tap permission)",
			text: `Prints every message the broker routes, or those on channels matching the
patterns (orders.*, orders.>, myplugin:*) and, with --node, from or to those
nodes: one line each with kind, id, from, to, channel, size, headers and a
preview of the body (--json: one object a line). The principal needs the
tap permission, and sees only what it could have received itself; a tapper
that reads too slowly misses copies, counted and reported on the next line
(docs/operations.md#busbar-tap). Like sub, it survives a lost connection:
it says so on stderr, reconnects and taps again.`,
			exit:    exitCommon,
			example: "$ busbar tap 'orders.>'\n$ busbar tap --node billing --json --count 10"},
	})
}

// runTap prints the traffic the broker routes, as `busctl monitor` and
// `nats sub '>'` do: every message its principal may tap and receive, or
// those on the channel patterns given and to or from the nodes given.
func runTap(args []string, stdio IO) int {
	v := newVerb("tap", func(int) bool { return true }, stdio)
	var nodes listFlag
	v.fs.Var(&nodes, "node", "only messages from or to this node (repeat, or a comma list)")
	asJSON := v.fs.Bool("json", false, "print each message as one JSON object per line")
	count := v.fs.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	if !v.parse(args) {
		return exitUsage
	}
	// Like sub, tap outlives its broker: the client reconnects for ever,
	// and the tap, which the broker forgets with the connection, is asked
	// for again on the new one.
	v.reconnecting(stdio)
	c, ctx, done, err := v.session(stdio, true)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	req := wire.TapRequest{Channels: v.args, Nodes: nodes}
	tp, err := c.Tap(ctx, req)
	if err != nil {
		return v.fail(stdio, err, requestExit(err))
	}
	// On stderr, so --json's stdout stays one object a line; a script
	// (or a test) waits for it before it sends what it wants to see.
	fmt.Fprintf(stdio.Stderr, "busbar tap: tapping %s\n", tapScope(v.args, nodes))
	enc := json.NewEncoder(stdio.Stdout)
	for n := 0; *count == 0 || n < *count; {
		ev, err := tp.Next(ctx)
		switch {
		case ctx.Err() != nil:
			return exitOK // interrupted
		case errors.Is(err, client.ErrTapEnded):
			if tp, err = retap(ctx, c, req); err != nil {
				if ctx.Err() != nil {
					return exitOK
				}
				return v.fail(stdio, fmt.Errorf("the tap ended: %v", cmpErr(c.Err(), err)), requestExit(err))
			}
			fmt.Fprintf(stdio.Stderr, "busbar tap: tapping %s again (what was routed while disconnected is not shown)\n", tapScope(v.args, nodes))
			continue
		case err != nil:
			return v.fail(stdio, err, exitFail)
		}
		n++
		if *asJSON {
			_ = enc.Encode(ev)
		} else {
			printTap(stdio.Stdout, &ev)
		}
	}
	return exitOK
}

// retap asks again for the tap a lost connection took with it, once the
// client is connected again; a connection lost again meanwhile is waited
// out the same way. A refusal (the permission gone) or the client's end
// is returned.
func retap(ctx context.Context, c *client.Client, req wire.TapRequest) (*client.Tap, error) {
	for {
		if err := c.WaitConnected(ctx); err != nil {
			return nil, err
		}
		tp, err := c.Tap(ctx, req)
		if err == nil || (!errors.Is(err, client.ErrDisconnect) && c.Connected()) {
			return tp, err
		}
	}
}

// tapScope says what a tap shows, for its first line.
func tapScope(channels, nodes []string) string {
	s := "every channel"
	if len(channels) > 0 {
		s = strings.Join(channels, " ")
	}
	if len(nodes) > 0 {
		s += " from or to " + strings.Join(nodes, ", ")
	}
	return s
}

// cmpErr is a when it is set, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// printTap prints one tap event on one line:
//
//	15:04:05.000 send alpha.bus → beta orders.new 3B id=… ttl=30000 "one"
func printTap(w io.Writer, ev *wire.TapEvent) {
	var b strings.Builder
	b.WriteString(ev.Time.Local().Format(time.TimeOnly + ".000"))
	b.WriteString(" " + ev.Kind + " " + ev.From)
	if ev.To != "" {
		b.WriteString(" → " + ev.To)
	}
	b.WriteString(" " + ev.Channel + " " + strconv.Itoa(ev.Size) + "B")
	if ev.ID != "" {
		b.WriteString(" id=" + ev.ID)
	}
	for _, k := range slices.Sorted(maps.Keys(ev.Headers)) {
		b.WriteString(" " + k + "=" + strconv.Quote(ev.Headers[k]))
	}
	if len(ev.Preview) > 0 {
		b.WriteString(" " + previewText(ev.Preview))
		if ev.Truncated {
			b.WriteString("…")
		}
	}
	if ev.Missed > 0 {
		b.WriteString(" (missed " + strconv.FormatUint(ev.Missed, 10) + " before this)")
	}
	fmt.Fprintln(w, b.String())
}

// previewText quotes a body's preview when it is text, else shows its
// first bytes in hex.
func previewText(p []byte) string {
	// A preview may cut a rune in two at its end.
	text := p
	for i := 0; i < utf8.UTFMax && len(text) > 0 && !utf8.Valid(text); i++ {
		text = text[:len(text)-1]
	}
	if len(text) > 0 && utf8.Valid(text) {
		return strconv.Quote(string(text))
	}
	const hexBytes = 32
	return fmt.Sprintf("hex:%x", p[:min(len(p), hexBytes)])
}
