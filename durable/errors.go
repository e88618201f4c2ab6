package durable

import (
	"errors"
	"fmt"

	"busbar/seal"
)

var (
	// ErrClosed: the Device was closed.
	ErrClosed = errors.New("durable: device closed")
	// ErrHandlerAlreadySet: OnMessage while a handler is registered.
	ErrHandlerAlreadySet = errors.New("durable: message handler already set")
	// ErrNoDevice: Open of a directory that Init did not make.
	ErrNoDevice = errors.New("durable: no device here (run Init first)")
	// ErrLocked: device.db stayed locked by another process for longer
	// than Options.LockTimeout.
	ErrLocked = errors.New("durable: device.db is locked by another process")
	// ErrTakenOver: the relay ended this process's receive session
	// because a newer receive session of the same device opened (another
	// process of the device). Serve returns it: two receivers of one
	// device would take the session from each other in turn.
	ErrTakenOver = errors.New("durable: a newer receive session of this device took over")
)

// RelayVersionUnsupported is the seed's relayVersionUnsupported{min, max}:
// the relay speaks only protocol versions Min to Max, none of them this
// library's. It is a state of the whole connection: nothing is pushed or
// received, entries stay queued (no sendFailed) until one side is
// upgraded. Serve returns it; Connection reports it.
type RelayVersionUnsupported struct {
	Min, Max int
	Have     string // this library's version
}

func (e *RelayVersionUnsupported) Error() string {
	v := fmt.Sprint(e.Min)
	if e.Max != e.Min {
		v = fmt.Sprintf("%d to %d", e.Min, e.Max)
	}
	return fmt.Sprintf("durable: relayVersionUnsupported: the relay speaks version %s, this device %s; entries stay queued until one is upgraded", v, e.Have)
}

// ErrPayloadTooLarge is what Send returns for a body over the device's
// maximum (Options.MaxPayloadBytes): Max is that maximum. Nothing is
// written.
type ErrPayloadTooLarge = seal.ErrPayloadTooLarge

// Membership statuses of ErrNotMember.
const (
	StatusNoGroup = "noGroup" // this device holds no manifest of the group
	StatusRemoved = "removed" // the manifest it holds does not list it
)

// ErrNotMember is what Send returns for a group this device cannot send
// to. It matches seal.ErrNotMember with errors.Is.
type ErrNotMember struct {
	Group  string
	Status string // StatusNoGroup or StatusRemoved
}

func (e *ErrNotMember) Error() string {
	return fmt.Sprintf("durable: not a member of group %q (%s)", e.Group, e.Status)
}

// Is makes errors.Is(err, seal.ErrNotMember) hold.
func (e *ErrNotMember) Is(target error) bool { return target == seal.ErrNotMember }
