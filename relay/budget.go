package relay

import "strings"

// The store's inboxes are of two classes, each with its own Budget:
// busbar's own (the device ids the broker derives from sealing keys,
// base32, which never hold a dot) and the edge protocols' (an edge
// protocol's name, a dot and the rest: trueseal's "trueseal.<key>"). An
// edge protocol may take pushes from anonymous senders (trueseal's push
// sessions prove nothing of the sender), so what they push counts only
// against the edge budget, and no amount of it refuses a push to one of
// busbar's own inboxes. The class of an inbox follows from its device id
// alone, so it is the same after a restart.

// class indexes Store.classes.
type class uint8

const (
	classOwn  class = iota // busbar's own inboxes: Options.MaxStoreBytes and the rest
	classEdge              // the edge protocols' inboxes: Options.Edge
	classes
)

// EdgeDevice reports whether device is an edge protocol's device id (one
// holding a dot), whose inbox counts against Options.Edge rather than
// busbar's own limits.
func EdgeDevice(device string) bool { return strings.IndexByte(device, '.') >= 0 }

func classOf(device string) class {
	if EdgeDevice(device) {
		return classEdge
	}
	return classOwn
}

// classUse is what the inboxes of one class hold, guarded by Store.mu:
// with the pushes in flight, what the class's Budget bounds.
type classUse struct {
	inboxes      int   // inboxes holding a blob
	bytes        int64 // their blob bytes on disk
	pendingBytes int64 // bytes of pushes admitted and not yet committed
	pendingOnly  int   // inboxes holding nothing but such pushes
}

// over reports whether a push of n bytes to ib (empty: it holds nothing
// and has nothing in flight) would pass its class's budget b.
func (u *classUse) over(b *Budget, ib *inbox, n int64, empty bool) bool {
	return ib.blobs+ib.pendingBlobs >= b.MaxInboxBlobs || ib.bytes+ib.pendingBytes+n > b.MaxInboxBytes ||
		u.bytes+u.pendingBytes+n > b.MaxStoreBytes ||
		empty && u.inboxes+u.pendingOnly >= b.MaxInboxes
}

// ClassStats are what one class of inboxes holds (Stats.Own, Stats.Edge).
type ClassStats struct {
	Inboxes int   // inboxes holding a blob
	Bytes   int64 // their blob bytes
	Pending int64 // bytes of pushes admitted, not yet synced (they count against the budget)
}
