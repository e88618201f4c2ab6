package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"busbar/auth"
	"busbar/client"
	"busbar/transport"
	"busbar/wire"
)

// Exit statuses of `busbar req`, one per request error kind.
const (
	exitNoHandler  = 3
	exitOverload   = 4
	exitTimeout    = 5
	exitDisconnect = 6
	exitRejected   = 7
	exitHandler    = 8
)

// isInputError reports whether err is bad input found before anything
// was sent: a malformed channel, target, node name or --server, or a
// payload over the limit. Every verb exits 2 for these (fail), whatever
// status it asked for; refusals by the broker keep their own.
func isInputError(err error) bool {
	var in *inputError
	return errors.As(err, &in) || errors.Is(err, auth.ErrBadChannel) || errors.Is(err, wire.ErrBadAddress) ||
		errors.Is(err, wire.ErrCrossMesh) || errors.Is(err, client.ErrPayloadTooLarge) ||
		errors.Is(err, auth.ErrBadNodeName) || errors.Is(err, transport.ErrBadEndpoint)
}

// inputError marks an error of the CLI's own checks as bad input.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// failCall reports the error of a request or publication and returns its
// exit status by kind (requestExit); bad input exits 2 (fail).
func (v *verbSetup) failCall(stdio IO, err error) int {
	return v.fail(stdio, err, requestExit(err))
}

// requestExit maps a request error to its exit status.
func requestExit(err error) int {
	for _, k := range []struct {
		err  error
		code int
	}{
		{client.ErrNoHandler, exitNoHandler}, {client.ErrOverload, exitOverload},
		{client.ErrTimeout, exitTimeout}, {client.ErrDisconnect, exitDisconnect},
		{client.ErrRejected, exitRejected}, {client.ErrAmbiguous, exitRejected}, {client.ErrHandlerFailed, exitHandler},
	} {
		if errors.Is(err, k.err) {
			return k.code
		}
	}
	return exitFail
}

// verbSetup parses a client verb's flags and positional arguments.
type verbSetup struct {
	name  string
	usage string
	nargs func(n int) bool
	fs    *flag.FlagSet
	conn  connFlags
	stdio IO
	args  []string              // positional arguments
	tune  func(*client.Options) // adjusts the connection's options
	check func() error          // checks the positional arguments before connecting
}

// newVerb sets up verb name (its help page's path, "pub" or "state
// get"), whose positional arguments nargs accepts; the usage its errors
// name is the help page's, the one source of a verb's arguments.
func newVerb(name string, nargs func(int) bool, stdio IO) *verbSetup {
	p, ok := page(name)
	if !ok {
		panic("cli: verb " + name + " has no help page")
	}
	v := &verbSetup{name: name, usage: p.args, nargs: nargs, stdio: stdio, fs: flag.NewFlagSet("busbar "+name, flag.ContinueOnError)}
	v.conn.register(v.fs)
	return v
}

// parse accepts flags before, between and after positional arguments
// ("busbar sub news --count 1"); "--" ends the flags. --help prints the
// verb's help; a usage error is one line on stderr.
func (v *verbSetup) parse(args []string) bool {
	for {
		if !parseFlags(v.stdio, v.name, v.fs, args) {
			return false
		}
		rest := v.fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			v.args = append(v.args, rest...) // after "--" everything is positional
			break
		}
		v.args = append(v.args, rest[0])
		args = rest[1:]
	}
	if !v.nargs(len(v.args)) {
		usageError(v.stdio, v.name, "%s", argCountError(v.usage, v.args))
		return false
	}
	return true
}

// arg is positional argument i.
func (v *verbSetup) arg(i int) string { return v.args[i] }

// payload is the argument at i, stdin when it is "-", or empty. Stdin is
// read up to the largest frame; past it, the rest is only counted, so the
// error names the payload's real size.
func (v *verbSetup) payload(i int, stdio IO) ([]byte, error) {
	if len(v.args) <= i {
		return nil, nil
	}
	if a := v.args[i]; a != "-" {
		return []byte(a), nil
	}
	b, err := io.ReadAll(io.LimitReader(stdio.Stdin, wire.MaxMessageBytes+1))
	if err != nil || len(b) <= wire.MaxMessageBytes {
		return b, err
	}
	rest, err := io.Copy(io.Discard, stdio.Stdin)
	if err != nil {
		return nil, err
	}
	return nil, &inputError{fmt.Errorf("%w: the payload on stdin is %d bytes, over the largest frame (%d bytes)",
		client.ErrPayloadTooLarge, int64(len(b))+rest, wire.MaxMessageBytes)}
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// session connects and returns the client and a context bounded by
// --timeout (and by SIGINT/SIGTERM when long is set).
func (v *verbSetup) session(stdio IO, long bool) (*client.Client, context.Context, func(), error) {
	base, stop := context.Background(), func() {}
	if long {
		base, stop = signal.NotifyContext(base, syscall.SIGINT, syscall.SIGTERM)
	}
	c, err := v.conn.connect(base, v.tune)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	ctx, cancel := base, context.CancelFunc(func() {})
	if !long {
		ctx, cancel = context.WithTimeout(base, v.conn.timeout)
	}
	return c, ctx, func() { cancel(); c.Close(); stop() }, nil
}

// reconnecting makes the verb's client survive its broker: it reconnects
// for ever, round --server's list, restoring what the verb registered,
// and says so on stderr at each gap. For the verbs that run until
// interrupted (sub, reply, state watch, ls --watch).
func (v *verbSetup) reconnecting(stdio IO) {
	prev := v.tune
	v.tune = func(o *client.Options) {
		if prev != nil {
			prev(o)
		}
		o.MaxReconnects = client.ReconnectForever
		o.OnConnEvent = func(ev client.ConnEvent) { v.notice(stdio, ev) }
	}
}

// notice prints a connection event on stderr.
func (v *verbSetup) notice(stdio IO, ev client.ConnEvent) {
	switch ev.Kind {
	case client.Disconnected:
		fmt.Fprintf(stdio.Stderr, "busbar %s: connection lost (%v); reconnecting\n", v.name, ev.Err)
	case client.Reconnected:
		fmt.Fprintf(stdio.Stderr, "busbar %s: reconnected to %s (broker %s)\n", v.name, orDash(ev.Server), ev.Broker)
		if ev.Err != nil {
			fmt.Fprintf(stdio.Stderr, "busbar %s: not restored: %v\n", v.name, ev.Err)
		}
	}
}

// fail prints err on stderr, one line, and returns the exit status:
// code, or exitUsage for bad input. Where the error carries a reply's rc,
// the line says which number is the rc and which the exit status.
func (v *verbSetup) fail(stdio IO, err error, code int) int {
	if isInputError(err) {
		code = exitUsage
	}
	text := err.Error()
	var re *client.RequestError
	if errors.As(err, &re) {
		rc := fmt.Sprintf("(rc %d)", re.RC)
		text = strings.Replace(text, rc, fmt.Sprintf("(rc %d in the reply; exit status %d)", re.RC, code), 1)
	}
	fmt.Fprintf(stdio.Stderr, "busbar %s: %s\n", v.name, text)
	return code
}

// call runs a one-shot verb: parse, read the payload (positional argument
// payloadArg, optional), connect, then do. It returns the exit status.
func (v *verbSetup) call(args []string, stdio IO, payloadArg int, do func(c *client.Client, ctx context.Context, payload []byte) int) int {
	if !v.parse(args) {
		return exitUsage
	}
	if v.check != nil {
		if err := v.check(); err != nil {
			return v.fail(stdio, err, exitUsage)
		}
	}
	payload, err := v.payload(payloadArg, stdio)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	c, ctx, done, err := v.session(stdio, false)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	return do(c, ctx, payload)
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

// callJSON is one line of `busbar pub|send|req --json`: who answered,
// with what result (a receipt's, a candidate's, OK for a reply, or the
// request error's kind), the message id, the rc and error text of a
// failure, and the milliseconds from sending to the answer; a reply's
// payload as sub --json prints one.
type callJSON struct {
	Node          string  `json:"node"`
	Result        string  `json:"result"`
	ID            string  `json:"id,omitempty"`
	RC            int     `json:"rc"`
	Error         string  `json:"error,omitempty"`
	Elapsed       float64 `json:"elapsed"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
}

// errorJSON is the line of a call that failed with err (to: its target).
func errorJSON(err error, to string, start time.Time) callJSON {
	j := callJSON{Node: to, Result: "ERROR", RC: int(wire.RCFailure), Error: err.Error(), Elapsed: sinceMS(start)}
	var re *client.RequestError
	if errors.As(err, &re) {
		j.Result, j.RC, j.Error = string(re.Kind), int(re.RC), re.Text
		if re.From != "" {
			j.Node = strings.TrimSuffix(re.From, ".bus")
		}
	}
	return j
}

func sinceMS(start time.Time) float64 {
	return float64(time.Since(start).Microseconds()) / 1000
}

func printCallJSON(w io.Writer, j callJSON) {
	b, _ := json.Marshal(j)
	_, _ = w.Write(append(b, '\n'))
}

// payloadJSON is a payload as a string when it is UTF-8, else for base64.
func payloadJSON(p []byte) (*string, []byte) {
	if utf8.Valid(p) {
		s := string(p)
		return &s, nil
	}
	return nil, p
}

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

func runReply(args []string, stdio IO) int {
	v := newVerb("reply", func(n int) bool { return n == 1 }, stdio)
	echo := v.fs.Bool("echo", false, "answer each request with its own payload")
	command := v.fs.String("exec", "", "run CMD (with sh -c) per request: payload on stdin, reply from stdout; a non-zero exit fails the request")
	count := v.fs.Int("count", 0, "exit after answering this many requests (0: run until interrupted)")
	service := v.fs.String("service", "", "announce a service of this name that handles CHANNEL")
	version := v.fs.String("version", "", "the announced service's version (with --service)")
	group := v.fs.String("group", "", "the announced service's group (with --service): every instance announced with one group shares the requests to the service, instead of being AMBIGUOUS")
	v.reconnecting(stdio)
	if !v.parse(args) {
		return exitUsage
	}
	if *echo == (*command != "") {
		fmt.Fprintln(stdio.Stderr, "busbar reply: give exactly one of --echo and --exec")
		return exitUsage
	}
	if *group != "" && *service == "" {
		fmt.Fprintln(stdio.Stderr, "busbar reply: --group needs --service")
		return exitUsage
	}
	c, ctx, done, err := v.session(stdio, true)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	var answered atomic.Int64
	finished := make(chan struct{}, 1)
	handler := func(hctx context.Context, m *client.Message) ([]byte, error) {
		defer func() {
			if n := answered.Add(1); *count > 0 && n >= int64(*count) {
				select {
				case finished <- struct{}{}:
				default:
				}
			}
		}()
		if *echo {
			return m.Payload(), nil
		}
		return execHandler(hctx, *command, m.Payload())
	}
	if _, err := c.Scope("cli").Channel(v.arg(0)).Handle(ctx, handler); err != nil {
		return v.fail(stdio, err, requestExit(err))
	}
	if *service != "" {
		a := wire.Announcement{Service: *service, Version: *version, Group: *group, Channels: []string{v.arg(0)}}
		if _, err := c.Announce(ctx, a); err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
	}
	select {
	case <-ctx.Done():
	case <-finished:
		time.Sleep(100 * time.Millisecond) // let the last reply leave
	case <-c.Done():
		return v.fail(stdio, c.Err(), exitFail)
	}
	return exitOK
}

// execHandler runs command with payload on stdin; its stdout is the reply.
func execHandler(ctx context.Context, command string, payload []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		text := strings.TrimSpace(stderr.String())
		if text == "" {
			text = err.Error()
		}
		return nil, &client.HandlerError{RC: wire.RCError, Text: text}
	}
	return out, nil
}

func runLs(args []string, stdio IO) int {
	v := newVerb("ls", func(n int) bool { return n == 0 }, stdio)
	asJSON := v.fs.Bool("json", false, "print JSON (with --watch: one object per line)")
	services := v.fs.Bool("services", false, "list the service registry instead of the nodes")
	watch := v.fs.Bool("watch", false, "list the service registry, then print each change as it happens (until interrupted)")
	if !v.parse(args) {
		return exitUsage
	}
	if *watch {
		return watchServices(v, stdio, *asJSON)
	}
	c, ctx, done, err := v.session(stdio, false)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	if *services {
		svcs, err := c.Whois(ctx, "")
		if err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		if *asJSON {
			_ = json.NewEncoder(stdio.Stdout).Encode(servicesView(svcs))
			return exitOK
		}
		printServices(stdio.Stdout, svcs)
		return exitOK
	}
	nodes, err := c.Directory(ctx)
	if err != nil {
		return v.fail(stdio, err, requestExit(err))
	}
	if *asJSON {
		_ = json.NewEncoder(stdio.Stdout).Encode(nodes)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	// ADVERTISED (a MoonBridge backend's game address) only when a node
	// advertises one.
	advertised := slices.ContainsFunc(nodes, func(n wire.NodeInfo) bool { return n.Advertised != "" })
	head := "NODE\tBROKER\tEPOCH\tLEASE\tSUBSCRIPTIONS\tHANDLERS"
	if advertised {
		head += "\tADVERTISED"
	}
	fmt.Fprintln(tw, head)
	for _, n := range nodes {
		lease := time.Until(n.LeaseExpires).Round(time.Second)
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", n.Node, orDash(n.Broker), n.Epoch, lease, list(n.Subscriptions), list(n.Handlers))
		if advertised {
			row += "\t" + orDash(n.Advertised)
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
	return exitOK
}

func printServices(w io.Writer, services []wire.ServiceInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tVERSION\tSCHEMA\tADDRESS\tCHANNELS\tCOLLISION\tGROUP")
	for _, s := range services {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%s\n", s.Service, orDash(s.Version), s.SchemaVersion, s.Address, list(s.Channels), s.Collision, orDash(s.Group))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// watchServices is ls --watch: the registry, then one line per change.
func watchServices(v *verbSetup, stdio IO, asJSON bool) int {
	v.reconnecting(stdio)
	c, ctx, done, err := v.session(stdio, true)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	w, err := c.WatchServices(ctx)
	if err != nil {
		return v.fail(stdio, err, requestExit(err))
	}
	enc := json.NewEncoder(stdio.Stdout)
	if asJSON {
		for _, s := range w.Initial() {
			_ = enc.Encode(serviceEventJSON{Op: wire.ServiceUp, Service: serviceView(s)})
		}
	} else {
		printServices(stdio.Stdout, w.Initial())
	}
	for ev := range w.Events() {
		if asJSON {
			_ = enc.Encode(serviceEventJSON{Op: ev.Op, Service: serviceView(ev.Service)})
			continue
		}
		s := ev.Service
		fmt.Fprintf(stdio.Stdout, "%s %s %s version=%s channels=%s collision=%v\n", ev.Op, s.Service, s.Address, orDash(s.Version), list(s.Channels), s.Collision)
	}
	if err := w.Err(); err != nil && ctx.Err() == nil {
		return v.fail(stdio, err, exitFail)
	}
	return exitOK
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}
