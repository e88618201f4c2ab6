package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"busbar/client"
	"busbar/durable"
	"busbar/wire"
)

// The device verbs: `busbar id` and `busbar durable` (docs/cli.md,
// docs/durable.md). A device is a directory, used by several processes at
// once (a listener keeps running while send runs in another shell): the
// durable package opens its store for one transaction at a time.

// envDevice names the device directory of the device verbs (id, group,
// durable).
const envDevice = "BUSBAR_DEVICE"

// deviceDir is --device, else $BUSBAR_DEVICE, else <data>/device.
func deviceDir(flagValue, data string) string {
	return cmp.Or(flagValue, os.Getenv(envDevice), filepath.Join(cmp.Or(data, defaultDataDir()), "device"))
}

// registerDevice adds --device to a verb's flags.
func registerDevice(v *verbSetup) *string {
	return v.fs.String("device", "", "device directory (env "+envDevice+"; default <data>/device)")
}

// deviceOptions are the options of every device the CLI opens: the
// defaults, with the crash point named by $BUSBAR_FAILPOINT armed (the
// process exits with status 86 when it reaches it; docs/durable.md,
// "Crash points").
func deviceOptions() (durable.Options, error) {
	return durable.FailpointFromEnv(durable.Options{})
}

// openDevice opens the device, saying how to create one if there is none.
func openDevice(dir string) (*durable.Device, error) {
	opts, err := deviceOptions()
	if err != nil {
		return nil, err
	}
	d, err := durable.Open(dir, opts)
	if errors.Is(err, durable.ErrNoDevice) {
		return nil, fmt.Errorf("no device at %s: create one with `busbar id init` (or `busbar group create NAME`)", dir)
	}
	return d, err
}
func init() {
	addVerb(runDurable, []helpPage{
		{path: "durable", summary: "durable, end-to-end-sealed delivery: send, listen, status, events",
			text: `What a device sends reaches every other member of the group at least
once, in its order, sealed to each, across crashes (docs/durable.md).`,
			exit:    "0  done\n1  no device, no such group, a failure\n2  usage\n7  a send the device refused (not a member, payload over 61,440 bytes)",
			example: "$ busbar durable send home hello\n$ busbar durable listen home"},
		{path: "durable send", args: "GROUP [BODY|-]", summary: "queue a message for the group and push it",
			text: `Prints the message's id once it is in the outbox (fsynced): from then on it
is delivered, whatever happens to this process. It then pushes what the
device has queued, once. When the relay cannot be reached (or refuses for
now), stderr says the message stays queued: a running ` + "`busbar durable listen`" + `
of this device pushes it as soon as it reaches the relay (within about
0.2 s of the send, or at once when its connection comes back), otherwise
the next send or listen of the device does.`,
			example: "$ busbar durable send home hello"},
		{path: "durable listen", args: "GROUP", summary: "the device's long-running process: receive, push, report, until interrupted",
			text: `The device's long-running process. It receives the device's messages, one
line each on stdout: ID SENDER BODY (--json: one object; --exec CMD runs
CMD per message instead, the body on its stdin, a non-zero exit being a
handler failure: retried, 5 attempts in all, then dropped with
handlerGaveUp). It pushes the device's outbox: at once, whenever another
process of the device queues a message, and every queued entry at once
when the connection comes back. It prints each delivery event as it is
raised (sendFailed, heldForUpgrade, unreadable, deliveryIssue,
handlerGaveUp), on stderr as "busbar durable listen: KIND message ID
...", with --json as one object a line on stdout with a "kind" field;
events raised while no listener ran are printed when one starts.

It survives its broker: when the connection is lost it says "connection
lost (...); reconnecting" on stderr, reconnects for ever with backoff,
says "reconnected to ...", and goes on with a new receive session and its
sender. Started before its broker, it waits for one. One listener
receives for a device at a time: a newer listen of the same device takes
the receive session over, and the older one says so and exits (status 9).
--count N ends it after N messages were handled or given up.`,
			exit: `0  interrupted (SIGINT, SIGTERM), or --count messages handled or given up
1  a failure it cannot recover from: no device or group, the device's
   store unreadable, the credentials refused, the relay refusing the
   receive session (this broker is no relay, or not permitted)
2  usage
9  a newer listener of the same device took over the receive session
10 relayVersionUnsupported: the relay speaks no protocol version of this
   busbar's; the outbox stays queued until one of them is upgraded`,
			example: "$ busbar durable listen home --count 1\n$ busbar durable listen home --exec 'cat >> inbox.txt'"},
		{path: "durable status", summary: "the outbox, held blobs, the relay's inbox and delivery events",
			text: `The outbox depth, the blobs held for an upgrade, the manifests kept until
their signer is known, the relay's inbox for this device (or
relayVersionUnsupported with the versions the relay speaks), and the
buffered delivery events. Reading them does not remove them: ` + "`busbar\ndurable events --ack`" + ` does.`,
			example: "$ busbar durable status --json"},
		{path: "durable events", summary: "the buffered delivery events (--follow: then each as it is raised)",
			text: `Prints the device's buffered delivery events, oldest first, one a line:
TIME KIND [message ID] [group G] [peer P] [reason R] [version V][: ERROR]
(--json: one object a line, with a "kind" field). They stay buffered
(the newest 1,000) unless --ack removes those printed. --follow then
prints each new event as any process of the device raises it, until
interrupted. It needs no broker.`,
			exit:    "0  done, or interrupted while following\n1  no device, or its store could not be read\n2  usage",
			example: "$ busbar durable events --follow --json"},
	})
}

func runDurable(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "durable", args); !ok {
		return code
	}
	{
		switch args[0] {
		case "send":
			return durableSend(args[1:], stdio)
		case "listen":
			return durableListen(args[1:], stdio)
		case "status":
			return durableStatus(args[1:], stdio)
		case "events":
			return durableEvents(args[1:], stdio)
		}
	}
	return exitUsage // not reached: pickSubcommand knows the subcommands
}

// durableSend puts the message in the outbox (it is sent from then on,
// whatever happens), prints its id, then pushes what is due once if the
// relay can be reached; what it cannot push waits for the next process of
// this device that reaches it (a listen, another send).
func durableSend(args []string, stdio IO) int {
	v := newVerb("durable send", func(n int) bool { return n == 1 || n == 2 }, stdio)
	dev := registerDevice(v)
	if !v.parse(args) {
		return exitUsage
	}
	body, err := v.payload(1, stdio)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	d, err := openDevice(deviceDir(*dev, v.conn.data))
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), v.conn.timeout)
	defer cancel()
	id, err := d.Send(ctx, v.arg(0), body)
	if err != nil {
		if t, perr := d.PendingJoin(v.arg(0)); perr == nil && t != nil {
			err = fmt.Errorf("%w; the join is pending: run `busbar durable listen %s` until the group's manifest arrives", err, v.arg(0))
		}
		return v.fail(stdio, err, exitRejected)
	}
	fmt.Fprintln(stdio.Stdout, id)
	// Sent to the other members as the group stands now: with none, the
	// message goes nowhere, which a user should hear of.
	if m, err := d.Group(v.arg(0)); err == nil && m != nil && len(m.Recipients(d.ID())) == 0 {
		fmt.Fprintf(stdio.Stderr, "busbar durable send: %s has no other members yet, so nothing will be delivered (invite a device: busbar group invite %s)\n", v.arg(0), v.arg(0))
		return exitOK
	}
	c, err := v.conn.connect(ctx, nil)
	if err != nil {
		leftQueued(stdio, err)
		return exitOK
	}
	defer c.Close()
	res, err := d.Flush(ctx, durable.NewClientRelay(c))
	switch {
	case err != nil:
		leftQueued(stdio, err)
	case res.Retry > 0:
		leftQueued(stdio, fmt.Errorf("the relay did not take %d of its entries this time", res.Retry))
	}
	return exitOK
}

// leftQueued tells the user that what send queued is not pushed yet, why,
// and who will push it.
func leftQueued(stdio IO, why error) {
	if rv := durable.VersionUnsupported(why); rv != nil {
		fmt.Fprintf(stdio.Stderr, "busbar durable send: queued in the outbox; not pushed: %v\n", rv)
		return
	}
	fmt.Fprintf(stdio.Stderr, "busbar durable send: queued in the outbox; not pushed yet (%v). A running `busbar durable listen` of this device pushes it as soon as it reaches the relay; otherwise the next send or listen of this device does\n", why)
}

// listenLine is how `busbar durable listen --json` prints a message.
type listenLine struct {
	ID    string    `json:"id"`
	From  string    `json:"from"`
	Group string    `json:"group"`
	Sent  time.Time `json:"sent"`
	Body  string    `json:"body,omitempty"`
	Bytes []byte    `json:"body_base64,omitempty"` // a body that is not UTF-8
}

// The exit statuses of `durable listen` beyond the common ones (help
// durable listen lists them all).
const (
	exitTakenOver          = 9  // a newer listener of the same device took over the receive session
	exitVersionUnsupported = 10 // relayVersionUnsupported: the relay speaks no version of this busbar's
)

// listenReconnectWaitMax bounds listen's wait between reconnect attempts
// (the client's default is 2 s): what the device queued while its broker
// was down leaves within about this long of the broker's return. One
// attempt a second at a local socket costs nothing.
const listenReconnectWaitMax = time.Second

// durableListen is the device's long-running process (durable.Serve): it
// receives the device's messages, each printed or run through --exec
// (whose failure is a handler error, retried as the seed says), pushes
// the outbox, prints each delivery event as it is raised, and reconnects
// for ever. It ends on a signal or --count (status 0), when a newer
// listener of the device takes over (exitTakenOver), when the relay speaks
// another protocol (exitVersionUnsupported), or on a failure it cannot
// recover from (1), each with one line on stderr.
func durableListen(args []string, stdio IO) int {
	v := newVerb("durable listen", func(n int) bool { return n == 1 }, stdio)
	dev := registerDevice(v)
	asJSON := v.fs.Bool("json", false, "one JSON object per message (the body as a string when it is UTF-8, else body_base64) and per event (with a kind field)")
	command := v.fs.String("exec", "", "run CMD (with sh -c) per message, the body on stdin; a non-zero exit is a handler failure, retried")
	count := v.fs.Int("count", 0, "exit after this many messages handled or given up (0: run until interrupted)")
	v.reconnecting(stdio)
	reconnect := v.tune
	v.tune = func(o *client.Options) {
		reconnect(o)
		o.ReconnectWaitMax = listenReconnectWaitMax
	}
	if !v.parse(args) {
		return exitUsage
	}
	if *count < 0 {
		return v.fail(stdio, fmt.Errorf("--count %d: want 0 or more", *count), exitUsage)
	}
	d, err := openDevice(deviceDir(*dev, v.conn.data))
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer d.Close()
	if _, err := d.Group(v.arg(0)); err != nil {
		// A device that asked to join listens to receive the manifest.
		if t, perr := d.PendingJoin(v.arg(0)); perr != nil || t == nil {
			return v.fail(stdio, err, exitFail)
		}
	}
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := connectPatiently(ctx, v, stdio)
	if err != nil {
		return listenExit(v, stdio, d, err)
	}
	if c == nil {
		return exitOK // interrupted before the first connection
	}
	defer c.Close()
	var mu sync.Mutex // stdout, and done
	done := 0
	enc := json.NewEncoder(stdio.Stdout)
	if _, err := d.OnMessage(func(hctx context.Context, m durable.Message) error {
		// Every message of the device is handled here, its group shown:
		// one handler per device, and a message left unhandled would be
		// retried, then dropped.
		if *command != "" {
			_, err := execHandler(hctx, *command, m.Body)
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if *asJSON {
			l := listenLine{ID: m.ID.String(), From: m.From.Public.ID().String(), Group: m.Group, Sent: m.Sent}
			if utf8.Valid(m.Body) {
				l.Body = string(m.Body)
			} else {
				l.Bytes = m.Body
			}
			_ = enc.Encode(l)
		} else {
			fmt.Fprintf(stdio.Stdout, "%s %s %s\n", m.ID, m.From.Public.ID(), m.Body)
		}
		return nil
	}); err != nil {
		return v.fail(stdio, err, exitFail)
	}
	err = d.Serve(ctx, durable.NewClientRelay(c), durable.ServeOptions{
		// With --count, listen ends after the last message's ack, not in
		// its handler: ending there would leave it unacked, to come again
		// as a duplicate on the next listen.
		OnDone: func(durable.Message, error) {
			mu.Lock()
			defer mu.Unlock()
			if done++; *count > 0 && done >= *count {
				cancel()
			}
		},
		OnEvent: func(e durable.Event) {
			mu.Lock()
			defer mu.Unlock()
			if *asJSON {
				_ = enc.Encode(eventsView([]durable.Event{e})[0])
				return
			}
			fmt.Fprintf(stdio.Stderr, "busbar %s: %s\n", v.name, eventText(e))
		},
		OnState: func(st durable.State) {
			if st.Kind == durable.StateRetrying {
				fmt.Fprintf(stdio.Stderr, "busbar %s: %v; retrying\n", v.name, st.Err)
			}
		},
	})
	if err != nil {
		return listenExit(v, stdio, d, err)
	}
	return exitOK
}

// listenExit says why listen ends, in one line, and returns its status.
func listenExit(v *verbSetup, stdio IO, d *durable.Device, err error) int {
	if errors.Is(err, durable.ErrTakenOver) {
		fmt.Fprintf(stdio.Stderr, "busbar %s: another listener of device %s took over its receive session (only one receives at a time); exiting\n", v.name, d.ID())
		return exitTakenOver
	}
	if rv := durable.VersionUnsupported(err); rv != nil {
		return v.fail(stdio, rv, exitVersionUnsupported)
	}
	return v.fail(stdio, err, exitFail)
}

// connectPatiently makes listen's first connection, trying again until
// ctx ends (a nil client then) while no broker answers: a device process
// may start before its broker. A refusal that trying again cannot cure
// (the credentials, the protocol version, a bad --server) is returned.
// Each new reason for waiting is said once on stderr.
func connectPatiently(ctx context.Context, v *verbSetup, stdio IO) (*client.Client, error) {
	wait, said := client.DefaultReconnectWaitMin, ""
	for {
		c, err := v.conn.connect(ctx, v.tune)
		switch {
		case err == nil:
			if said != "" {
				fmt.Fprintf(stdio.Stderr, "busbar %s: connected to broker %s\n", v.name, c.Broker())
			}
			return c, nil
		case ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, client.ErrAuth), errors.Is(err, client.ErrIncompatible), errors.Is(err, client.ErrNotBroker), isInputError(err):
			return nil, err
		}
		if text := err.Error(); text != said {
			fmt.Fprintf(stdio.Stderr, "busbar %s: not connected yet (%v); retrying\n", v.name, err)
			said = text
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		wait = min(wait*2, listenReconnectWaitMax)
	}
}

// eventText is a delivery event in one line: its kind, then what it is
// about (the message, group, peer, reason or version), then the error.
func eventText(e durable.Event) string {
	var b strings.Builder
	b.WriteString(e.Kind)
	if !e.MessageID.IsZero() {
		fmt.Fprintf(&b, " message %s", e.MessageID)
	}
	for _, kv := range [][2]string{{"group", e.Group}, {"peer", e.Peer}, {"reason", e.Reason}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s %s", kv[0], kv[1])
		}
	}
	if e.Version != 0 {
		fmt.Fprintf(&b, " version %d", e.Version)
	}
	if e.Err != "" {
		fmt.Fprintf(&b, ": %s", e.Err)
	}
	return b.String()
}

// durableEvents prints the device's buffered delivery events without
// consuming them (--ack removes those printed), and with --follow each
// new one as it is raised, until interrupted.
func durableEvents(args []string, stdio IO) int {
	v := newVerb("durable events", func(n int) bool { return n == 0 }, stdio)
	dev := registerDevice(v)
	asJSON := v.fs.Bool("json", false, "one JSON object per event")
	follow := v.fs.Bool("follow", false, "then print each new event as it is raised, until interrupted")
	ack := v.fs.Bool("ack", false, "remove the events printed from the buffer (with --follow: each as it is printed)")
	if !v.parse(args) {
		return exitUsage
	}
	d, err := openDevice(deviceDir(*dev, v.conn.data))
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer d.Close()
	enc := json.NewEncoder(stdio.Stdout)
	show := func(evs []durable.Event) error {
		for _, e := range evs {
			if *asJSON {
				_ = enc.Encode(eventsView([]durable.Event{e})[0])
			} else {
				fmt.Fprintf(stdio.Stdout, "%s %s\n", e.Time.Format(time.RFC3339), eventText(e))
			}
		}
		if *ack && len(evs) > 0 {
			return d.AckEvents(evs[len(evs)-1].Seq)
		}
		return nil
	}
	evs, dropped, err := d.Events(0)
	if err == nil {
		err = show(evs)
	}
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	if dropped > 0 {
		fmt.Fprintf(stdio.Stderr, "busbar %s: %d older events were dropped unread (the buffer holds %d)\n", v.name, dropped, durable.DefaultMaxEvents)
	}
	if !*follow {
		return exitOK
	}
	ctx, stop := signalContext()
	defer stop()
	var last uint64
	if len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	if err := d.FollowEvents(ctx, last, show); err != nil && ctx.Err() == nil {
		return v.fail(stdio, err, exitFail)
	}
	return exitOK
}

// versionJSON is relayVersionUnsupported{min, max} in `durable status
// --json`.
type versionJSON struct {
	Min  int    `json:"min"`
	Max  int    `json:"max"`
	Have string `json:"have"`
}

func newVersionJSON(rv *durable.RelayVersionUnsupported) *versionJSON {
	if rv == nil {
		return nil
	}
	return &versionJSON{rv.Min, rv.Max, rv.Have}
}

// durableStatus prints the device's outbox depth, its held blobs, the
// manifests it keeps until their signer is known, the relay's inbox (or
// relayVersionUnsupported), and the buffered delivery events, which it
// reads without removing them.
func durableStatus(args []string, stdio IO) int {
	v := newVerb("durable status", func(n int) bool { return n == 0 }, stdio)
	dev := registerDevice(v)
	asJSON := v.fs.Bool("json", false, "print one JSON object")
	if !v.parse(args) {
		return exitUsage
	}
	d, err := openDevice(deviceDir(*dev, v.conn.data))
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer d.Close()
	outbox, err := d.Outbox()
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	held, err := d.Held()
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	pending, err := d.PendingManifests()
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	events, dropped, err := d.Events(0) // read, not consumed: `durable events --ack` removes them
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	// The relay's side, when it can be reached: what it holds for this
	// device, not yet received and acked.
	var inbox *wire.DurableInbox
	var unsupported *durable.RelayVersionUnsupported
	ctx, cancel := context.WithTimeout(context.Background(), v.conn.timeout)
	defer cancel()
	if c, err := v.conn.connect(ctx, nil); err != nil {
		if unsupported = durable.VersionUnsupported(err); unsupported == nil {
			fmt.Fprintf(stdio.Stderr, "busbar durable status: the relay's inbox is unknown (%v)\n", err)
		}
	} else {
		defer c.Close()
		if in, err := c.DurableInbox(ctx, d.Identity()); err != nil {
			fmt.Fprintf(stdio.Stderr, "busbar durable status: the relay's inbox is unknown (%v)\n", err)
		} else {
			inbox = &in
		}
	}
	if *asJSON {
		_ = json.NewEncoder(stdio.Stdout).Encode(struct {
			Device        string             `json:"device"`
			Outbox        int                `json:"outbox"`
			Held          int                `json:"held"`
			Pending       int                `json:"pending_manifests"`
			RelayInbox    *wire.DurableInbox `json:"relay_inbox,omitempty"`
			Unsupported   *versionJSON       `json:"relay_version_unsupported,omitempty"`
			Events        []eventJSON        `json:"events"`
			EventsDropped uint64             `json:"events_dropped"`
		}{d.ID().String(), outbox, held, pending, inbox, newVersionJSON(unsupported), eventsView(events), dropped})
		return exitOK
	}
	fmt.Fprintf(stdio.Stdout, "device %s\noutbox %d\nheld %d\npending manifests %d\n", d.ID(), outbox, held, pending)
	if unsupported != nil {
		fmt.Fprintf(stdio.Stdout, "relay relayVersionUnsupported min %d max %d (this busbar speaks %s; the outbox stays queued until one is upgraded)\n", unsupported.Min, unsupported.Max, unsupported.Have)
	}
	if inbox != nil {
		fmt.Fprintf(stdio.Stdout, "relay inbox %d blobs, %d bytes\n", inbox.Blobs, inbox.Bytes)
	}
	for _, e := range events {
		fmt.Fprintf(stdio.Stdout, "event %s %s\n", e.Time.Format(time.RFC3339), eventText(e))
	}
	if dropped > 0 {
		fmt.Fprintf(stdio.Stdout, "events dropped %d\n", dropped)
	}
	return exitOK
}
