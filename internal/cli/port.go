package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"busbar/edge"
	"busbar/edge/port"
	"busbar/wire"
)

// portLsTimeout bounds each port's info answer in `busbar port ls`.
const portLsTimeout = 2 * time.Second

func init() {
	addVerb(runPort, []helpPage{
		{path: "port", summary: "cosmix-style ports: serve, call, ls",
			text: `Small Unix-socket command servers, one request per connection
(docs/ports.md), in $BUSBAR_PORTS, else $XDG_RUNTIME_DIR/busbar/ports.`,
			exit:    exitCommon,
			example: "$ busbar port call notes count"},
		{path: "port serve", args: "NAME --exec CMD", summary: "serve port NAME, running CMD per command",
			text: `Serves NAME until interrupted. Each command runs "sh -c CMD" with the
command in $BUSBAR_PORT_COMMAND and its JSON arguments on stdin; stdout is
the reply. Exit 0 is rc 0, 5 a warning, any other an error.`,
			example: "$ busbar port serve notes --exec 'echo 3' --command count=\"Count the notes\""},
		{path: "port call", args: "NAME|PATH COMMAND [ARGS|-]", summary: "call a port and print the reply body",
			text: "ARGS is JSON (- reads stdin). The exit status is the floor of the reply's rc band.",
			exit: `0   rc 0-4: success
5   rc 5-9: a warning (its text on stderr)
10  rc 10-19: an application error
20  rc 20 or more: a severe failure
1   no reply: no such port, the connection failed, the deadline passed
2   usage: bad arguments, ARGS not JSON, a bad port name`,
			example: "$ busbar port call notes count\n{\"notes\":3}"},
		{path: "port ls", summary: "list the ports with what their info answers",
			text: "One row per socket in both directories (--json: one array).", example: "$ busbar port ls"},
	})
}

func runPort(args []string, stdio IO) int {
	ops := map[string]func([]string, IO) int{"serve": runPortServe, "call": runPortCall, "ls": runPortLs}
	if code, ok := pickSubcommand(stdio, "port", args); !ok {
		return code
	}
	return ops[args[0]](args[1:], stdio)
}

// commandFlags collects repeated --command NAME=DESCRIPTION flags.
type commandFlags map[string]string

func (c commandFlags) String() string { return "" }

func (c commandFlags) Set(s string) error {
	name, desc, _ := strings.Cut(s, "=")
	if name == "" {
		return errors.New("want NAME=DESCRIPTION")
	}
	c[name] = desc
	return nil
}

func runPortServe(args []string, stdio IO) int {
	v := newVerb("port serve", func(n int) bool { return n == 1 }, stdio)
	command := v.fs.String("exec", "", "run CMD (with sh -c) per request: the command in $BUSBAR_PORT_COMMAND, the JSON arguments on stdin, the reply body from stdout; exit 0 is rc 0, 5 a warning, any other an error (rc 10, or the status when 10 or more), the text from stderr")
	commands := commandFlags{}
	v.fs.Var(commands, "command", "a command the port lists in help, as NAME=DESCRIPTION (repeatable); with none, every command goes to CMD")
	app := v.fs.String("app", "", "the program's name, reported by info (default: NAME)")
	version := v.fs.String("version", "", "the program's version, reported by info")
	announce := v.fs.String("announce", "", "also answer on the bus, on channel port:NAME, and announce a service of this name (connects to the broker)")
	group := v.fs.String("group", "", "with --announce: the service group the announcement declares; ports of one name announced with one group share the service's requests")
	v.reconnecting(stdio) // used only with --announce
	if !v.parse(args) {
		return exitUsage
	}
	if *group != "" && *announce == "" {
		fmt.Fprintln(stdio.Stderr, "busbar port: --group needs --announce")
		return exitUsage
	}
	if *command == "" {
		fmt.Fprintln(stdio.Stderr, "busbar port serve: --exec CMD is required")
		return exitUsage
	}
	name := v.arg(0)
	// The port's door logs its accept failures and, rate-limited, the
	// requests it refuses, as warnings on stderr.
	door := edge.Door{Log: slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	cfg := port.Config{Name: name, App: *app, Version: *version, Group: *group, Commands: map[string]port.Command{}, Door: door}
	if cfg.App == "" {
		cfg.App = name
	}
	run := func(ctx context.Context, cmd string, args json.RawMessage) (any, error) {
		return execPortCommand(ctx, *command, name, cmd, args)
	}
	if len(commands) == 0 {
		cfg.Fallback = run
	}
	for n, desc := range commands {
		cfg.Commands[n] = port.Command{Description: desc, Run: func(ctx context.Context, args json.RawMessage) (any, error) { return run(ctx, n, args) }}
	}
	srv, err := port.New(cfg)
	if err != nil {
		return v.fail(stdio, err, exitUsage)
	}
	path, err := port.Path(name)
	if err != nil {
		return v.fail(stdio, err, exitUsage)
	}
	l, err := port.Listen(path)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() { srv.Close(); <-served }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var done <-chan struct{}
	if *announce != "" {
		c, cctx, closeSession, err := v.session(stdio, true)
		if err != nil {
			return v.fail(stdio, err, exitFail)
		}
		defer closeSession()
		if err := srv.ServeBus(cctx, c, *announce); err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		done = c.Done()
		fmt.Fprintf(stdio.Stdout, "busbar: port %s answers on the bus as service %s, channel %s\n", name, *announce, port.BusChannel(name))
	}
	fmt.Fprintf(stdio.Stdout, "busbar: port %s listening on %s\n", name, path)
	select {
	case <-ctx.Done():
	case <-done:
		return v.fail(stdio, errors.New("broker connection ended"), exitFail)
	}
	return exitOK
}

// execPortCommand runs one port command through sh -c.
func execPortCommand(ctx context.Context, script, portName, command string, args json.RawMessage) (any, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = append(os.Environ(), "BUSBAR_PORT="+portName, "BUSBAR_PORT_COMMAND="+command)
	cmd.Stdin = bytes.NewReader(args)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	body := replyBody(out)
	text := strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	switch {
	case err == nil:
		return body, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case !errors.As(err, &ee):
		return nil, &port.Error{RC: wire.RCFailure, Text: err.Error()}
	}
	code := ee.ExitCode()
	if text == "" {
		text = fmt.Sprintf("%s exited with status %d", command, code)
	}
	switch {
	case code == int(wire.RCWarning):
		return body, &port.Error{RC: wire.RCWarning, Text: text}
	case code > 0 && code < int(wire.RCError):
		code = int(wire.RCError) // a shell's 1 is a failure, not ARexx's success band
	case code < 0: // killed by a signal
		code = int(wire.RCFailure)
	}
	return nil, &port.Error{RC: wire.RC(code), Text: text}
}

// replyBody is a script's stdout as a JSON body: itself when it is JSON,
// else a JSON string of it (trimmed), null when empty.
func replyBody(out []byte) json.RawMessage {
	out = bytes.TrimSpace(out)
	switch {
	case len(out) == 0:
		return json.RawMessage("null")
	case json.Valid(out):
		return out
	}
	b, _ := json.Marshal(string(out))
	return b
}

// rcExit is `busbar port call`'s exit status for a reply's rc: the floor
// of its band (0, 5, 10, 20).
func rcExit(rc wire.RC) int {
	switch {
	case rc >= wire.RCFailure:
		return int(wire.RCFailure)
	case rc >= wire.RCError:
		return int(wire.RCError)
	case rc >= wire.RCWarning:
		return int(wire.RCWarning)
	}
	return exitOK
}

// bandNote tells the exit status apart from the reply's rc when they
// differ (rc 23 exits 20, the floor of its band); "" when they are equal.
func bandNote(rc wire.RC) string {
	if code := rcExit(rc); code != int(rc) {
		return fmt.Sprintf(" (exit status %d, the floor of rc %d's band)", code, rc)
	}
	return ""
}

func runPortCall(args []string, stdio IO) int {
	v := newVerb("port call", func(n int) bool { return n == 2 || n == 3 }, stdio)
	if !v.parse(args) {
		return exitUsage
	}
	path, err := port.Resolve(v.arg(0))
	if err != nil {
		return v.fail(stdio, err, exitUsage)
	}
	raw, err := v.payload(2, stdio)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	var callArgs any
	if raw = bytes.TrimSpace(raw); len(raw) > 0 {
		if !json.Valid(raw) {
			return v.fail(stdio, fmt.Errorf("ARGS must be JSON (a string is \"quoted\"): %q", raw), exitUsage)
		}
		callArgs = json.RawMessage(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), v.conn.timeout)
	defer cancel()
	r, err := port.CallPort(ctx, path, v.arg(1), callArgs)
	var pe *port.Error
	switch {
	case errors.As(err, &pe):
		return v.fail(stdio, fmt.Errorf("%w%s", err, bandNote(pe.RC)), rcExit(pe.RC))
	case errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(v.arg(0), '/'):
		return v.fail(stdio, fmt.Errorf("no port named %q in %s or %s", v.arg(0), port.Dir(), port.CosmixDir()), exitFail)
	case err != nil:
		return v.fail(stdio, err, exitFail)
	}
	if len(r.Body) > 0 {
		fmt.Fprintf(stdio.Stdout, "%s\n", r.Body)
	}
	if r.RC >= wire.RCWarning {
		fmt.Fprintf(stdio.Stderr, "busbar port call: warning (rc %d): %s%s\n", r.RC, r.Error, bandNote(r.RC))
	}
	return rcExit(r.RC)
}

func runPortLs(args []string, stdio IO) int {
	fs := flag.NewFlagSet("busbar port ls", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if !parseNoArgs(stdio, "port ls", fs, args) {
		return exitUsage
	}
	entries, err := port.List(context.Background(), portLsTimeout)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar port ls:", err)
		return exitFail
	}
	if *asJSON {
		if entries == nil {
			entries = []port.Entry{}
		}
		_ = json.NewEncoder(stdio.Stdout).Encode(entries)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIR\tAPP\tVERSION\tCOMMANDS\tPATH")
	for _, e := range entries {
		if e.Info == nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t(%s)\t%s\n", e.Name, e.Dir, e.Error, e.Path)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Dir, orDash(e.Info.App), orDash(e.Info.Version), list(e.Info.CommandList), e.Path)
	}
	_ = tw.Flush()
	return exitOK
}
