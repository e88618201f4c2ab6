package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"busbar/client"
	"busbar/state"
)

func init() {
	addVerb(runState, []helpPage{
		{path: "state", summary: "replicated state: get, set, del, open, dump, watch, drop, owner",
			text: `Reads and writes the broker's replicated, namespaced key-value state
(docs/state.md). Every entry prints as one JSON object a line:
{"k":KEY,"v":VALUE,"ver":VERSION,"src":WRITER} (the protocol's field names).
The CLI writes as its principal's name (local for the broker's own
credentials), so a namespace it creates outlives the process.`,
			exit: exitCommon + `
3-7  as for req, when the broker refuses (7: REJECTED, e.g. not permitted)`,
			example: "$ busbar state set home target 20.5\n{\"k\":\"target\",\"v\":20.5,\"ver\":1,\"src\":\"local\"}"},
		{path: "state get", args: "NS KEY", summary: "print one entry",
			text: "Prints the entry KEY of namespace NS; a missing key exits 1.", example: "$ busbar state get home target"},
		{path: "state set", args: "NS KEY VALUE", summary: "write an entry (VALUE is JSON)",
			text: "Writes KEY in NS and prints the entry as written. VALUE is JSON; a value that\nis not JSON is refused (exit 2) unless --string stores it as text.", example: "$ busbar state set home target 20.5\n$ busbar state set home label 'living room' --string"},
		{path: "state del", args: "NS KEY", summary: "delete an entry",
			text: "Deletes KEY in NS and prints the tombstone.", example: "$ busbar state del home target"},
		{path: "state open", args: "NS KEY", summary: "open an entry (the first writer wins)",
			text: "Claims KEY in NS if nobody holds it, and prints the entry.", example: "$ busbar state open home lock"},
		{path: "state dump", args: "[NS]", summary: "print a namespace (without NS: all of them)",
			text: "Prints the snapshot of NS, or of every namespace, as JSON.", example: "$ busbar state dump home"},
		{path: "state watch", args: "NS", summary: "print the entries, then each change",
			text: "Prints NS's entries, then one line per change until interrupted; it reconnects like sub.", example: "$ busbar state watch home"},
		{path: "state drop", args: "NS", summary: "delete a whole namespace (state_admin)",
			text: `Deletes namespace NS with every entry, whoever owns it; watchers are told
to resync. Needs the state_admin permission on NS. On a bus of brokers
every broker drops it (docs/cluster.md#dropping-a-namespace-and-giving-it-a-new-owner).`, example: "$ busbar state drop home"},
		{path: "state owner", args: "NS NODE", summary: "give a namespace to another owner (state_admin)",
			text: `Makes NODE the owner of namespace NS, whoever owns it now (say, a
cli-<pid> long gone). Needs the state_admin permission on NS. On a bus of
brokers every broker takes the new owner (docs/state.md#administration).`, example: "$ busbar state owner home thermostat"},
	})
}

// runState is `busbar state`: one verb per operation on a namespace.
func runState(args []string, stdio IO) int {
	ops := map[string]int{"get": 2, "set": 3, "del": 2, "open": 2, "dump": -1, "watch": 1, "drop": 1, "owner": 2}
	if code, ok := pickSubcommand(stdio, "state", args); !ok {
		return code
	}
	op, want := args[0], ops[args[0]]
	v := newVerb("state "+op, func(n int) bool { return n == want || want == -1 && n <= 1 }, stdio)
	asString := v.fs.Bool("string", false, "set: take the value as a string, whatever it holds")
	if !v.parse(args[1:]) {
		return exitUsage
	}
	if err := checkStateArgs(op, v.args); err != nil {
		return usageError(stdio, "state "+op, "%v", err)
	}
	if op == "set" || op == "del" || op == "open" {
		// A namespace belongs to the node that creates it, for good: a
		// write from the CLI owns it as a name that outlives the process
		// (the principal's), unless --name says which.
		v.tune = stableWriter(v.conn.name == "")
	}
	var value json.RawMessage // set's, checked before connecting
	if op == "set" {
		var err error
		if value, err = stateValue(v.arg(2), *asString); err != nil {
			return usageError(stdio, "state set", "%v", err)
		}
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
		return show(c.State(v.arg(0)).Set(ctx, v.arg(1), value))
	case "del":
		return show(c.State(v.arg(0)).Delete(ctx, v.arg(1)))
	case "open":
		return show(c.State(v.arg(0)).Open(ctx, v.arg(1)))
	case "drop":
		if err := c.State(v.arg(0)).Drop(ctx); err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		return exitOK
	case "owner":
		snap, err := c.State(v.arg(0)).SetOwner(ctx, v.arg(1))
		if err != nil {
			return v.fail(stdio, err, requestExit(err))
		}
		_ = enc.Encode(snap)
		return exitOK
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

// stateValue is the value of `state set`: JSON as given, or with --string
// the text as a JSON string. Text that is not JSON is refused rather than
// guessed at: `20.5` and `"20.5"` are different values.
func stateValue(arg string, asString bool) (json.RawMessage, error) {
	if asString {
		return json.Marshal(arg)
	}
	if !json.Valid([]byte(arg)) {
		quoted, _ := json.Marshal(clipText(arg))
		return nil, fmt.Errorf("value %q is not JSON: give --string to store it as text, or write it as JSON ('%s')", clipText(arg), quoted)
	}
	return json.RawMessage(arg), nil
}

// clipText shortens s for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// stableWriter names a state writer after its principal when on is set:
// the principal's name with '_' and '.' as '-', a node name that the next
// run of the CLI, as the same principal, uses too.
func stableWriter(on bool) func(*client.Options) {
	if !on {
		return nil
	}
	return func(o *client.Options) {
		o.Node = strings.Trim(strings.Map(func(r rune) rune {
			if r == '_' || r == '.' {
				return '-'
			}
			return r
		}, o.Credential.Principal), "-")
	}
}
