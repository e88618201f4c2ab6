package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"busbar/durable"
	"busbar/seal"
)

// groupOps are the operations of `busbar group`: the positional
// arguments each takes and what runs it (their usage and help are the
// help pages in this file's init).
var groupOps = []struct {
	name  string
	nargs int
	run   func(g *groupVerb, stdio IO) int
}{
	{"create", 1, (*groupVerb).create},
	{"invite", 1, (*groupVerb).invite},
	{"join", 1, (*groupVerb).join},
	{"show", 1, (*groupVerb).show},
	{"leave", 1, (*groupVerb).leave},
	{"revoke", 2, (*groupVerb).revoke},
}

// groupVerb is one `busbar group` operation: its flags and the device.
type groupVerb struct {
	*verbSetup
	device, label string
	ttl           time.Duration
	asJSON        bool
}

func init() {
	addVerb(runGroup, []helpPage{
		{path: "group", summary: "durable groups of this device: create, invite, join, show, leave, revoke",
			text: `A device's groups for durable delivery (docs/durable.md). The device is
the directory --device, else $BUSBAR_DEVICE, else <data>/device. join,
leave and revoke write to the outbox, then push it once: an unreachable
relay leaves the change queued (stderr says so; exit 0).`,
			exit:    "0  done\n1  the device or the group refused (no device, no such group, a locked device.db)\n2  usage: an invalid group name, label, token, device id or --ttl",
			example: "$ busbar group create home --label laptop\n$ busbar group invite home --ttl 1h > token.txt"},
		{path: "group create", args: "NAME", summary: "start a group with this device its only member",
			text: "Starts group NAME (epoch 1); makes the device if the directory has none.", example: "$ busbar group create home"},
		{path: "group invite", args: "NAME", summary: "print an invitation token for one device to join NAME",
			text: "Prints a one-line token (busbar-invite:…) on stdout, valid for --ttl.", example: "$ busbar group invite home > token.txt"},
		{path: "group join", args: "TOKEN|-", summary: "ask to join with a token",
			text: "Queues a Pair to the inviter and pushes it; - reads the token on stdin.", example: "$ busbar group join - --device ~/phone < token.txt"},
		{path: "group show", args: "NAME", summary: "print the members and the epoch of NAME",
			text: "One row per member (device id, label); a pending join says so.", example: "$ busbar group show home --json"},
		{path: "group leave", args: "NAME", summary: "leave NAME; the last member deletes it",
			text: "Tells the other members through the relay.", example: "$ busbar group leave home"},
		{path: "group revoke", args: "NAME DEVICE", summary: "remove DEVICE from NAME",
			text: "Removes the device (its id) and tells it and the members.", example: "$ busbar group revoke home hgvihxujug6l3e2jdu2yyiqfcpnwjasm"},
	})
}

// runGroup is `busbar group`: the device's groups, over the durable path.
func runGroup(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "group", args); !ok {
		return code
	}
	for _, op := range groupOps {
		if len(args) == 0 || args[0] != op.name {
			continue
		}
		g := &groupVerb{verbSetup: newVerb("group "+op.name, func(n int) bool { return n == op.nargs }, stdio)}
		g.fs.StringVar(&g.device, "device", os.Getenv(envDevice), "device directory (env "+envDevice+"; default <data>/device)")
		switch op.name {
		case "create", "join":
			g.fs.StringVar(&g.label, "label", defaultLabel(), "this device's label in the group, for people")
		case "invite":
			g.fs.DurationVar(&g.ttl, "ttl", 24*time.Hour, "how long the token is valid (1m to 168h)")
		case "show":
			g.fs.BoolVar(&g.asJSON, "json", false, "print JSON")
		}
		if !g.parse(args[1:]) {
			return exitUsage
		}
		return op.run(g, stdio)
	}
	return exitUsage // not reached: pickSubcommand knows the operations
}

// defaultLabel is the host's name, cut to a valid label.
func defaultLabel() string {
	h, _ := os.Hostname()
	if len(h) > seal.MaxLabelLen {
		h = h[:seal.MaxLabelLen]
	}
	if !seal.ValidLabel(h) {
		return ""
	}
	return h
}

func (g *groupVerb) dir() string {
	return cmp.Or(g.device, filepath.Join(cmp.Or(g.conn.data, defaultDataDir()), "device"))
}

// open opens the device; with create set, a directory without one gets a
// new identity.
func (g *groupVerb) open(create bool) (*durable.Device, error) {
	opts, err := deviceOptions()
	if err != nil {
		return nil, err
	}
	d, err := durable.Open(g.dir(), opts)
	if create && errors.Is(err, durable.ErrNoDevice) {
		return durable.Init(g.dir(), opts)
	}
	return d, err
}

// failDevice reports an error of the device or of its store: exitFail.
func (g *groupVerb) failDevice(stdio IO, err error) int {
	return g.fail(stdio, err, exitFail)
}

func (g *groupVerb) checkName(stdio IO, name string) bool {
	if !seal.ValidGroupName(name) {
		g.fail(stdio, fmt.Errorf("%q is not a group name: 1 to %d bytes of [A-Za-z0-9._-], starting with a letter or digit", name, seal.MaxGroupNameLen), exitUsage)
		return false
	}
	return true
}

func (g *groupVerb) create(stdio IO) int {
	name := g.arg(0)
	if !g.checkName(stdio, name) {
		return exitUsage
	}
	if !seal.ValidLabel(g.label) {
		return g.fail(stdio, fmt.Errorf("label %q: at most %d bytes of UTF-8, no control characters", g.label, seal.MaxLabelLen), exitUsage)
	}
	d, err := g.open(true)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	defer d.Close()
	if m, err := d.Group(name); err != nil || m != nil {
		return g.failDevice(stdio, cmp.Or(err, fmt.Errorf("group %s exists (epoch %d)", name, m.Epoch())))
	}
	m, err := d.CreateGroup(name, g.label)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	fmt.Fprintf(stdio.Stdout, "group %s created: epoch %d, device %s\n", m.Name(), m.Epoch(), d.ID())
	return exitOK
}

func (g *groupVerb) invite(stdio IO) int {
	name := g.arg(0)
	if !g.checkName(stdio, name) {
		return exitUsage
	}
	if g.ttl < seal.MinInviteTTL || g.ttl > seal.MaxInviteTTL {
		return g.fail(stdio, fmt.Errorf("--ttl %v: from %v to %v", g.ttl, seal.MinInviteTTL, seal.MaxInviteTTL), exitUsage)
	}
	d, err := g.open(false)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	defer d.Close()
	tok, err := d.Invite(name, g.ttl)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	fmt.Fprintln(stdio.Stdout, tok.Text())
	fmt.Fprintf(stdio.Stderr, "busbar group invite: one device may join %s with this token until %s: busbar group join TOKEN\n"+
		"(this device accepts it when it receives the Pair: keep busbar durable listen running)\n",
		name, tok.Expires().UTC().Format(time.RFC3339))
	return exitOK
}

func (g *groupVerb) join(stdio IO) int {
	text, err := g.payload(0, stdio)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	if !seal.ValidLabel(g.label) {
		return g.fail(stdio, fmt.Errorf("label %q: at most %d bytes of UTF-8, no control characters", g.label, seal.MaxLabelLen), exitUsage)
	}
	tok, err := seal.ParseToken(string(text))
	if err != nil {
		return g.fail(stdio, err, exitUsage)
	}
	d, err := g.open(true)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	defer d.Close()
	if err := d.Join(context.Background(), tok.Text(), g.label); err != nil {
		return g.failDevice(stdio, err)
	}
	fmt.Fprintf(stdio.Stdout, "joining %s: device %s asked %s\n", tok.Group(), d.ID(), tok.Inviter().ID())
	return g.flush(stdio, d)
}

func (g *groupVerb) leave(stdio IO) int {
	name := g.arg(0)
	if !g.checkName(stdio, name) {
		return exitUsage
	}
	d, err := g.open(false)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	defer d.Close()
	if err := d.Leave(context.Background(), name); err != nil {
		return g.failDevice(stdio, err)
	}
	fmt.Fprintf(stdio.Stdout, "left %s\n", name)
	return g.flush(stdio, d)
}

func (g *groupVerb) revoke(stdio IO) int {
	name := g.arg(0)
	if !g.checkName(stdio, name) {
		return exitUsage
	}
	id, err := seal.ParseDeviceID(g.arg(1))
	if err != nil {
		return g.fail(stdio, fmt.Errorf("device %q: %w", g.arg(1), err), exitUsage)
	}
	d, err := g.open(false)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	defer d.Close()
	if err := d.Revoke(context.Background(), name, id); err != nil {
		return g.failDevice(stdio, err)
	}
	fmt.Fprintf(stdio.Stdout, "revoked %s from %s\n", id, name)
	return g.flush(stdio, d)
}

// flush pushes the outbox once. The change is already on disk: an
// unreachable relay leaves it queued for the next flush (any busbar
// durable verb), which is said on stderr and is not a failure.
func (g *groupVerb) flush(stdio IO, d *durable.Device) int {
	note := func(err error) int {
		fmt.Fprintf(stdio.Stderr, "busbar %s: queued, not sent yet (%v); it goes with the next flush\n", g.name, err)
		return exitOK
	}
	c, ctx, done, err := g.session(stdio, false)
	if err != nil {
		return note(err)
	}
	defer done()
	res, err := d.Flush(ctx, durable.NewClientRelay(c))
	if err != nil {
		return note(err)
	}
	if res.Pending > 0 {
		return note(fmt.Errorf("%d entries wait in the outbox", res.Pending))
	}
	return exitOK
}

// groupView is what `busbar group show --json` prints.
type groupView struct {
	Group   string       `json:"group"`
	Epoch   uint64       `json:"epoch,omitempty"`
	Signer  string       `json:"signer,omitempty"`
	Self    string       `json:"self"`
	Member  bool         `json:"member"`
	Pending bool         `json:"pending,omitempty"` // a join waits for the inviter's manifest
	Inviter string       `json:"inviter,omitempty"`
	Members []memberView `json:"members,omitempty"`
}

type memberView struct {
	ID    string `json:"id"`
	Label string `json:"label"`
}

func (g *groupVerb) show(stdio IO) int {
	name := g.arg(0)
	if !g.checkName(stdio, name) {
		return exitUsage
	}
	d, err := g.open(false)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	defer d.Close()
	m, err := d.Group(name)
	if err != nil {
		return g.failDevice(stdio, err)
	}
	view := groupView{Group: name, Self: d.ID().String()}
	if m != nil {
		view.Epoch, view.Signer, view.Member = m.Epoch(), m.Signer().String(), m.Has(d.ID())
		for _, mb := range m.Members() {
			view.Members = append(view.Members, memberView{ID: mb.ID().String(), Label: mb.Label})
		}
	}
	if !view.Member {
		tok, err := d.PendingJoin(name)
		if err != nil {
			return g.failDevice(stdio, err)
		}
		if tok != nil {
			view.Pending, view.Inviter = true, tok.Inviter().ID().String()
		}
	}
	if m == nil && !view.Pending {
		return g.failDevice(stdio, fmt.Errorf("this device (%s) holds no group %s", d.ID(), name))
	}
	if g.asJSON {
		_ = json.NewEncoder(stdio.Stdout).Encode(view)
		return exitOK
	}
	printGroup(stdio.Stdout, view)
	return exitOK
}

func printGroup(w io.Writer, v groupView) {
	switch {
	case v.Pending && v.Epoch == 0:
		fmt.Fprintf(w, "group %s: join pending, waiting for the manifest of %s\n", v.Group, v.Inviter)
		return
	case !v.Member:
		fmt.Fprintf(w, "group %s, epoch %d: this device is no longer a member\n", v.Group, v.Epoch)
	default:
		fmt.Fprintf(w, "group %s, epoch %d, %d members, signed by %s\n", v.Group, v.Epoch, len(v.Members), v.Signer)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tLABEL\t")
	for _, mb := range v.Members {
		self := ""
		if mb.ID == v.Self {
			self = "(this device)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mb.ID, strings.TrimSpace(cmp.Or(mb.Label, "-")), self)
	}
	tw.Flush()
}
