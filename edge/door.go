package edge

import (
	"log/slog"
	"net"
)

// Door is what the edge gives an adapter: its share of the process's
// shared door. The broker hands one out (broker.(*Broker).Door); an
// adapter's options take it as a field. Its zero value is a door on its
// own: a log to nowhere, a refusal log of its own, no shared admission.
type Door struct {
	// Log is where the door logs what is not a refusal (accept
	// failures, sessions begun and ended).
	Log *slog.Logger
	// Refusals is the refusal log every door shares: a refusal (bad
	// registration, over capacity, malformed frame, failed handshake) is
	// written through it, never to Log directly.
	Refusals *RefusalLog
	// Hold is the shared pre-login admission: a connection holds a place
	// from accept until its peer has proved who it is.
	Hold Hold
}

// Ready returns d with every field set: a nil Log logs nowhere, a nil
// Refusals is a refusal log of its own over Log, a nil Hold admits every
// connection with nothing to release.
func (d Door) Ready() Door {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Refusals == nil {
		d.Refusals = NewRefusalLog(d.Log)
	}
	if d.Hold == nil {
		d.Hold = func(net.Conn) func() { return func() {} }
	}
	return d
}
