package edge

import (
	"sync"
	"sync/atomic"
)

// What the doors of the process did, counted by door and reason, for the
// metrics (busbar_accept_failures_total, busbar_door_closed_total,
// busbar_door_frames_expired_total). They are the process's, as the
// descriptors they are about are: a door's name and its reasons are a
// handful of constants, so each map stays small.
var (
	acceptFailures Counts[string]     // by door: temporary accept failures retried
	closed         Counts[DoorReason] // connections a door ended on a deadline
	expired        Counts[string]     // by door: frames dropped at write time, their deadline past
)

// Counts is a set of counters by key, safe for concurrent use, for keys
// of which there are a handful (a door, a reason). Its zero value is
// ready.
type Counts[K comparable] struct{ m sync.Map } // K → *atomic.Uint64

// Add adds n to k's counter.
func (c *Counts[K]) Add(k K, n uint64) {
	v, ok := c.m.Load(k)
	if !ok {
		v, _ = c.m.LoadOrStore(k, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(n)
}

// Read returns every counter.
func (c *Counts[K]) Read() map[K]uint64 {
	out := map[K]uint64{}
	c.m.Range(func(k, v any) bool {
		out[k.(K)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

// AcceptFailures returns how many temporary accept failures each door has
// retried since the process started.
func AcceptFailures() map[string]uint64 { return acceptFailures.Read() }

// A DoorReason is a door and why it ended a connection.
type DoorReason struct{ Door, Reason string }

// CountClosed counts a connection that door ended for reason: a deadline
// for its login passed (login_timeout), or its session stayed idle past
// the door's idle deadline (idle).
func CountClosed(door, reason string) { closed.Add(DoorReason{door, reason}, 1) }

// Closed returns the connections each door ended, by reason.
func Closed() map[DoorReason]uint64 { return closed.Read() }

// CountExpired counts n frames that door's writer dropped, never
// written, because their deadline passed while they waited.
func CountExpired(door string, n uint64) {
	if n > 0 {
		expired.Add(door, n)
	}
}

// Expired returns the frames each door dropped at write time.
func Expired() map[string]uint64 { return expired.Read() }

// The reasons a door ends a connection, for CountClosed.
const (
	// ReasonLoginTimeout: the peer did not prove who it is (hello,
	// registration, handshake, upgrade) within the door's deadline.
	ReasonLoginTimeout = "login_timeout"
	// ReasonIdle: a session that logged in sent and asked for nothing
	// within the door's idle deadline.
	ReasonIdle = "idle"
)
