package cli

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"busbar/durable"
	"busbar/seal"
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

func runID(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "id", args); !ok {
		return code
	}
	v := newVerb("id "+args[0], "", func(n int) bool { return n == 0 }, stdio)
	dev := registerDevice(v)
	asJSON := v.fs.Bool("json", false, "print the device as a JSON object")
	if !v.parse(args[1:]) {
		return exitUsage
	}
	dir := deviceDir(*dev, v.conn.data)
	var d *durable.Device
	var err error
	if args[0] == "init" {
		var opts durable.Options
		if opts, err = deviceOptions(); err == nil {
			d, err = durable.Init(dir, opts)
		}
		if err != nil && errors.Is(err, seal.ErrKeyExists) {
			fmt.Fprintf(stdio.Stderr, "busbar id init: %s already holds a device\n", dir)
			d, err = openDevice(dir)
		}
	} else {
		d, err = openDevice(dir)
	}
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer d.Close()
	if !*asJSON {
		fmt.Fprintln(stdio.Stdout, d.ID())
		return exitOK
	}
	groups, _ := d.Groups()
	_ = json.NewEncoder(stdio.Stdout).Encode(struct {
		ID     string   `json:"id"`
		Dir    string   `json:"dir"`
		Public string   `json:"public"`
		Groups []string `json:"groups"`
	}{d.ID().String(), d.Dir(), base64.StdEncoding.EncodeToString(d.Identity().Public().Bytes()), groups})
	return exitOK
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
		}
	}
	return exitUsage // not reached: pickSubcommand knows the subcommands
}

// durableSend puts the message in the outbox (it is sent from then on,
// whatever happens), prints its id, then pushes what is due once if the
// relay can be reached; what it cannot push waits for the next process of
// this device that reaches it (a listen, another send).
func durableSend(args []string, stdio IO) int {
	v := newVerb("durable send", "GROUP [BODY|-]", func(n int) bool { return n == 1 || n == 2 }, stdio)
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
		fmt.Fprintf(stdio.Stderr, "busbar durable send: queued in the outbox; not pushed yet (%v)\n", err)
		return exitOK
	}
	defer c.Close()
	if _, err := d.Flush(ctx, durable.NewClientRelay(c)); err != nil {
		fmt.Fprintf(stdio.Stderr, "busbar durable send: queued in the outbox; not pushed yet (%v)\n", err)
	}
	return exitOK
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

// durableListen receives this device's messages until interrupted (or
// --count): each printed, or run through --exec, whose failure is a
// handler error retried as the seed says. It also pushes the outbox.
func durableListen(args []string, stdio IO) int {
	v := newVerb("durable listen", "GROUP", func(n int) bool { return n == 1 }, stdio)
	dev := registerDevice(v)
	asJSON := v.fs.Bool("json", false, "one JSON object per message (the body as a string when it is UTF-8, else body_base64)")
	command := v.fs.String("exec", "", "run CMD (with sh -c) per message, the body on stdin; a non-zero exit is a handler failure, retried")
	count := v.fs.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	if !v.parse(args) {
		return exitUsage
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
	c, err := v.conn.connect(ctx, nil)
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer c.Close()
	var mu sync.Mutex // printing, and the count
	handled := 0
	// With --count, listen ends after the last message's ack, not in its
	// handler: ending there would leave it unacked, to come again as a
	// duplicate on the next listen.
	relay := ackThen{durable.NewClientRelay(c), func() {
		mu.Lock()
		defer mu.Unlock()
		if *count > 0 && handled >= *count {
			cancel()
		}
	}}
	enc := json.NewEncoder(stdio.Stdout)
	if _, err := d.OnMessage(func(hctx context.Context, m durable.Message) error {
		// Every message of the device is handled here, its group shown:
		// one handler per device, and a message left unhandled would be
		// retried, then dropped.
		if *command != "" {
			if _, err := execHandler(hctx, *command, m.Body); err != nil {
				return err
			}
		} else {
			mu.Lock()
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
			mu.Unlock()
		}
		mu.Lock()
		handled++
		mu.Unlock()
		return nil
	}); err != nil {
		return v.fail(stdio, err, exitFail)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.RunSender(ctx, relay, time.Second) })
	err = d.Run(ctx, relay)
	cancel()
	wg.Wait()
	if err != nil && ctx.Err() == nil {
		return v.fail(stdio, err, exitFail)
	}
	return exitOK
}

// ackThen is a relay whose sessions call after once each ack is made.
type ackThen struct {
	durable.Relay
	after func()
}

func (r ackThen) Receive(ctx context.Context, me *seal.Identity) (durable.Session, error) {
	s, err := r.Relay.Receive(ctx, me)
	if err != nil {
		return nil, err
	}
	return ackThenSession{s, r.after}, nil
}

type ackThenSession struct {
	durable.Session
	after func()
}

func (s ackThenSession) Ack(ctx context.Context, seq uint64) error {
	err := s.Session.Ack(ctx, seq)
	s.after()
	return err
}

// durableStatus prints the device's outbox depth, its held blobs, the
// manifests it keeps until their signer is known, and the delivery events
// raised since the last status or listen took them.
func durableStatus(args []string, stdio IO) int {
	v := newVerb("durable status", "", func(n int) bool { return n == 0 }, stdio)
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
	events, dropped, err := d.TakeEvents()
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	// The relay's side, when it can be reached: what it holds for this
	// device, not yet received and acked.
	var inbox *wire.DurableInbox
	ctx, cancel := context.WithTimeout(context.Background(), v.conn.timeout)
	defer cancel()
	if c, err := v.conn.connect(ctx, nil); err != nil {
		fmt.Fprintf(stdio.Stderr, "busbar durable status: the relay's inbox is unknown (%v)\n", err)
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
			Events        []eventJSON        `json:"events"`
			EventsDropped uint64             `json:"events_dropped"`
		}{d.ID().String(), outbox, held, pending, inbox, eventsView(events), dropped})
		return exitOK
	}
	fmt.Fprintf(stdio.Stdout, "device %s\noutbox %d\nheld %d\npending manifests %d\n", d.ID(), outbox, held, pending)
	if inbox != nil {
		fmt.Fprintf(stdio.Stdout, "relay inbox %d blobs, %d bytes\n", inbox.Blobs, inbox.Bytes)
	}
	for _, e := range events {
		fmt.Fprintf(stdio.Stdout, "event %s %s %s %s\n", e.Time.Format(time.RFC3339), e.Kind, e.MessageID, cmp.Or(e.Reason, e.Err))
	}
	if dropped > 0 {
		fmt.Fprintf(stdio.Stdout, "events dropped %d\n", dropped)
	}
	return exitOK
}
