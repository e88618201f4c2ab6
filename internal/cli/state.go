package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"busbar/client"
	"busbar/state"
)

// runState is `busbar state`: one verb per operation on a namespace.
func runState(args []string, stdio IO) int {
	ops := map[string]int{"get": 2, "set": 3, "del": 2, "open": 2, "dump": -1, "watch": 1}
	if code, ok := pickSubcommand(stdio, "state", args); !ok {
		return code
	}
	op, want := args[0], ops[args[0]]
	p, _ := page("state " + op)
	v := newVerb("state "+op, p.args, func(n int) bool { return n == want || want == -1 && n <= 1 }, stdio)
	if !v.parse(args[1:]) {
		return exitUsage
	}
	if err := checkStateArgs(op, v.args); err != nil {
		return usageError(stdio, "state "+op, "%v", err)
	}
	if op == "watch" {
		v.reconnecting(stdio)
	}
	c, ctx, done, err := v.session(stdio, op == "watch")
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer done()
	enc := json.NewEncoder(stdio.Stdout)
	show := func(e state.Entry, err error) int {
		var sup *client.SupersededError
		if errors.As(err, &sup) {
			_ = enc.Encode(sup.Winner)
			return v.fail(stdio, err, exitFail)
		}
		if err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		_ = enc.Encode(e)
		return exitOK
	}
	switch op {
	case "get":
		e, found, err := c.State(v.arg(0)).Get(ctx, v.arg(1))
		if err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		if !found {
			return v.fail(stdio, fmt.Errorf("no key %q in namespace %q", v.arg(1), v.arg(0)), exitFail)
		}
		return show(e, nil)
	case "set":
		// The value is JSON; anything else is taken as a string.
		raw := json.RawMessage(v.arg(2))
		if !json.Valid(raw) {
			raw, _ = json.Marshal(v.arg(2))
		}
		return show(c.State(v.arg(0)).Set(ctx, v.arg(1), raw))
	case "del":
		return show(c.State(v.arg(0)).Delete(ctx, v.arg(1)))
	case "open":
		return show(c.State(v.arg(0)).Open(ctx, v.arg(1)))
	case "dump":
		if len(v.args) == 0 {
			all, err := c.Snapshots(ctx)
			if err != nil {
				return v.fail(stdio, err, requestExit(err))
			}
			_ = enc.Encode(all)
			return exitOK
		}
		snap, err := c.State(v.arg(0)).Snapshot(ctx)
		if err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		_ = enc.Encode(snap)
		return exitOK
	case "watch":
		w, err := c.State(v.arg(0)).Watch(ctx)
		if err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		for _, e := range w.Initial().Entries {
			_ = enc.Encode(e)
		}
		for e := range w.Changes() {
			_ = enc.Encode(e)
		}
		if err := w.Err(); err != nil && ctx.Err() == nil {
			return v.fail(stdio, err, exitFail)
		}
		return exitOK
	}
	return exitUsage
}
