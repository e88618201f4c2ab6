package cli

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"busbar/client"
	"busbar/wire"
)

func init() {
	addVerb(runReply, []helpPage{
		{path: "reply", args: "CHANNEL (--echo | --exec CMD)", summary: "answer requests on a channel (--echo, or --exec CMD per request)",
			text: `Handles requests on CHANNEL until interrupted (or --count of them): with
--echo each reply is the request's payload; with --exec CMD, "sh -c CMD"
runs per request with the payload on stdin, and its stdout is the reply. A
non-zero exit fails the request (HANDLER_FAILED, rc 10, its stderr as the
error text). --service NAME also announces a service, so "busbar req NAME"
finds it by name. It reconnects like sub.`,
			exit:    exitCommon,
			example: "$ busbar reply math --exec 'tr a-z A-Z' --name upper"},
	})
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
