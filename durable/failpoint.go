package durable

import (
	"fmt"
	"os"
	"slices"
)

// The crash points of the delivery contract (seed 001, docs/durable.md
// "Crash points"): the places where a process that dies leaves a state the
// contract describes. Each is a failpoint by this name.
const (
	// FailSenderBeforeOutbox: Send has the message, nothing is written.
	// The message was not sent.
	FailSenderBeforeOutbox = "sender-before-outbox"
	// FailSenderAfterOutbox: the outbox entry is committed, Send has not
	// returned. The next process of the device pushes it.
	FailSenderAfterOutbox = "sender-after-outbox"
	// FailSenderAfterPush: the relay stored the blob, the entry is still
	// in the outbox. It is pushed again; the recipient's dedup drops the
	// copy.
	FailSenderAfterPush = "sender-after-push"
	// FailRecipientBeforeDedup: the handler returned, the dedup record is
	// not written. The blob comes again and the handler runs again.
	FailRecipientBeforeDedup = "recipient-before-dedup"
	// FailRecipientBeforeAck: the dedup record is written, the blob is
	// not acked. It comes again, is a duplicate, and is acked.
	FailRecipientBeforeAck = "recipient-before-ack"
)

// Failpoints lists the crash points in the order of the contract.
var Failpoints = []string{
	FailSenderBeforeOutbox,
	FailSenderAfterOutbox,
	FailSenderAfterPush,
	FailRecipientBeforeDedup,
	FailRecipientBeforeAck,
}

// EnvFailpoint names the crash point at which a process armed by
// FailpointFromEnv exits.
const EnvFailpoint = "BUSBAR_FAILPOINT"

// FailpointExit is the exit status of a process that reached its armed
// crash point.
const FailpointExit = 86

// FailpointFromEnv arms opts from $BUSBAR_FAILPOINT, for a binary whose
// crashes are tested with real processes. Unset or empty, opts is returned
// as it is and costs nothing. A crash point's name arms that point: the
// first time the process reaches it, it writes one line to stderr and
// exits with FailpointExit at once, as a crash would (no deferred function
// runs, nothing is flushed or closed; a bbolt transaction in progress is
// never committed). Any other value is an error.
func FailpointFromEnv(opts Options) (Options, error) {
	name := os.Getenv(EnvFailpoint)
	if name == "" {
		return opts, nil
	}
	if !slices.Contains(Failpoints, name) {
		return opts, fmt.Errorf("%s=%q: not a crash point (one of %v)", EnvFailpoint, name, Failpoints)
	}
	opts.failpoint = func(at string) error {
		if at == name {
			fmt.Fprintf(os.Stderr, "busbar: failpoint %s reached: exit %d\n", name, FailpointExit)
			os.Exit(FailpointExit)
		}
		return nil
	}
	return opts, nil
}
