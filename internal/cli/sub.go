package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"busbar/auth"
	"busbar/client"
)

// messageJSON is how `busbar sub --json` prints a message: the payload
// as a string when it is UTF-8, else in base64 as payload_base64.
type messageJSON struct {
	ID            string  `json:"id"`
	Kind          string  `json:"kind"`
	Channel       string  `json:"channel"`
	From          string  `json:"from"`
	To            string  `json:"to,omitempty"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
}

func newMessageJSON(m *client.Message) messageJSON {
	j := messageJSON{ID: m.ID(), Kind: string(m.Kind()), Channel: m.Channel(), From: m.From(), To: m.To()}
	if p := m.Payload(); utf8.Valid(p) {
		s := string(p)
		j.Payload = &s
	} else {
		j.PayloadBase64 = p
	}
	return j
}

// subLine is the default form of a received message, one line each: the
// payload as it is when it is one printable line of UTF-8 not starting
// with a double quote, else quoted (strconv.Quote: \n, \t, \xff), so a
// multi-line or binary payload never reads as several messages. A
// wildcard subscription puts the channel first.
func subLine(m *client.Message, withChannel bool) string {
	p := string(m.Payload())
	if !plainLine(p) {
		p = strconv.Quote(p)
	}
	if withChannel {
		return m.Channel() + " " + p + "\n"
	}
	return p + "\n"
}

// plainLine reports whether s prints as itself on one line, unmistakably.
func plainLine(s string) bool {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return false
		}
	}
	return true
}
func init() {
	addVerb(runSub, []helpPage{
		{path: "sub", args: "CHANNEL|PATTERN", summary: "print the events received on a channel",
			text: `Subscribes to CHANNEL, or to a pattern ('orders.*': one token, 'orders.>':
one or more; quote it for the shell), and prints each event's payload on a
line of its own, quoted when it spans lines or is not text, after its
channel for a pattern (--raw: the bytes as they are; --json: the whole
message as one JSON object a line). It runs until interrupted, --count
events, or --timeout if given (a subscription has no deadline otherwise).
It survives its broker: a lost connection is said on stderr and retried
until the subscription is back (what was published meanwhile is not
delivered later).

` + connNote,
			exit: `0  interrupted, --count events received, or --timeout passed without --count
1  --timeout passed before --count events arrived, or it failed (no broker,
   refused login)
2  usage: a bad argument, flag or pattern (nothing was sent)
7  REJECTED: the broker refused the subscription (not permitted)`,
			example: "$ busbar sub news --count 1\nhello"},
	})
}

func runSub(args []string, stdio IO) int {
	v := newVerb("sub", func(n int) bool { return n == 1 }, stdio)
	asJSON := v.fs.Bool("json", false, "print each whole message as one JSON object")
	raw := v.fs.Bool("raw", false, "write each payload's bytes as they are, nothing added")
	count := v.fs.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	queue := v.fs.String("queue", "", "subscribe as a member of this queue: each message goes to one member of each queue (docs/messaging.md#queue-subscriptions)")
	v.tune = func(o *client.Options) { o.Workers = 1 } // print in arrival order
	v.reconnecting(stdio)
	if f := v.fs.Lookup("timeout"); f != nil { // a subscription has no deadline unless given one
		f.Usage, f.DefValue = "end the subscription after this long (none unless given)", ""
	}
	if !v.parse(args) {
		return exitUsage
	}
	if *asJSON && *raw {
		return v.fail(stdio, errors.New("--json and --raw are exclusive"), exitUsage)
	}
	if *count < 0 {
		return v.fail(stdio, fmt.Errorf("--count %d: want 0 or more", *count), exitUsage)
	}
	timed := false // --timeout bounds a subscription only when it is given
	v.fs.Visit(func(f *flag.Flag) { timed = timed || f.Name == "timeout" })
	c, ctx, done, err := v.session(stdio, true)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	var expired <-chan time.Time
	if timed {
		t := time.NewTimer(v.conn.timeout)
		defer t.Stop()
		expired = t.C
	}
	msgs := make(chan *client.Message, 1024)
	subscribe := c.Scope("cli").Channel(v.arg(0)).Subscribe
	if *queue != "" {
		subscribe = func(ctx context.Context, h client.EventHandler) (*client.Subscription, error) {
			return c.Scope("cli").Channel(v.arg(0)).QueueSubscribe(ctx, *queue, h)
		}
	}
	if _, err := subscribe(ctx, func(hctx context.Context, m *client.Message) {
		select { // printed one at a time, in arrival order, by the loop below
		case msgs <- m:
		case <-hctx.Done():
		}
	}); err != nil {
		return v.fail(stdio, err, requestExit(err))
	}
	enc := json.NewEncoder(stdio.Stdout)
	wild := auth.IsPattern(v.arg(0))
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case <-ctx.Done():
			return exitOK
		case <-c.Done():
			return v.fail(stdio, c.Err(), exitFail)
		case <-expired:
			if *count > 0 {
				return v.fail(stdio, fmt.Errorf("--timeout %v passed with %d of %d messages", v.conn.timeout, n, *count), exitFail)
			}
			return exitOK
		case m := <-msgs:
			switch {
			case *asJSON:
				_ = enc.Encode(newMessageJSON(m))
			case *raw:
				_, _ = stdio.Stdout.Write(m.Payload())
			default:
				_, _ = io.WriteString(stdio.Stdout, subLine(m, wild))
			}
		}
	}
	return exitOK
}
