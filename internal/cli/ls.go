package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"busbar/wire"
)

func init() {
	addVerb(runLs, []helpPage{
		{path: "ls", summary: "list nodes with their leases, subscriptions and handlers (--services: the registry)",
			text: `Prints the broker's directory: one row per node with its broker, epoch,
lease left, subscriptions and handlers. --services prints the service
registry instead; --watch prints the registry and then each change (it
reconnects like sub). --json: JSON (with --watch one object a line).`,
			exit:    exitCommon,
			example: "$ busbar ls\n$ busbar ls --services --json"},
	})
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
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", n.Node, orDash(n.Broker), n.Epoch, leaseLeft(n), list(subscriptionsWithQueues(n)), list(n.Handlers))
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

// subscriptionsWithQueues are n's subscriptions, a queue member's with
// its queue in brackets ("news[workers]"): brackets are in no channel
// name, so the column stays one word per subscription.
func subscriptionsWithQueues(n wire.NodeInfo) []string {
	out := make([]string, len(n.Subscriptions))
	for i, ch := range n.Subscriptions {
		out[i] = ch
		if q := n.Queues[ch]; q != "" {
			out[i] = ch + "[" + q + "]"
		}
	}
	return out
}

// leaseLeft is the LEASE column: the time left of the node's busbar
// lease, never less than 0s (a node past its lease is dropped at the
// broker's next sweep); "-" for a MoonBridge backend (a node with an
// advertised game address), whose lease is not busbar's but its
// adapter's (30 s from its last HEARTBEAT, docs/moonbridge.md).
func leaseLeft(n wire.NodeInfo) string {
	if n.Advertised != "" {
		return "-"
	}
	return max(time.Until(n.LeaseExpires).Round(time.Second), 0).String()
}
