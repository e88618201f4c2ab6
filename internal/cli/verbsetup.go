package cli

// What the client verbs share: their flags and connection (verbSetup),
// the payload argument, reconnecting, and exit statuses by error kind.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

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
	// A MoonBridge backend's own failures (docs/moonbridge.md).
	exitNotConnected = 9
	exitProtocol     = 10
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
		{client.ErrNotConnected, exitNotConnected}, {client.ErrProtocol, exitProtocol},
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

// orDash and list print an empty field as "-" in the tables.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}
