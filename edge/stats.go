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
	acceptFailures tally // by door: temporary accept failures retried
	closed         tally // by door and reason: connections a door ended on a deadline
	expired        tally // by door: frames dropped at write time, their deadline past
)

// tally is a set of counters by key.
type tally struct{ m sync.Map } // string → *atomic.Uint64

func (t *tally) add(key string, n uint64) {
	v, ok := t.m.Load(key)
	if !ok {
		v, _ = t.m.LoadOrStore(key, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(n)
}

func (t *tally) read() map[string]uint64 {
	out := map[string]uint64{}
	t.m.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

// AcceptFailures returns how many temporary accept failures each door has
// retried since the process started.
func AcceptFailures() map[string]uint64 { return acceptFailures.read() }

// A DoorReason is a door and why it ended a connection.
type DoorReason struct{ Door, Reason string }

// CountClosed counts a connection that door ended for reason: a deadline
// for its login passed (login_timeout), or its session stayed idle past
// the door's idle deadline (idle).
func CountClosed(door, reason string) { closed.add(door+"\x00"+reason, 1) }

// Closed returns the connections each door ended, by reason.
func Closed() map[DoorReason]uint64 {
	out := map[DoorReason]uint64{}
	for k, n := range closed.read() {
		for i := range len(k) {
			if k[i] == 0 {
				out[DoorReason{k[:i], k[i+1:]}] = n
				break
			}
		}
	}
	return out
}

// CountExpired counts n frames that door's writer dropped, never
// written, because their deadline passed while they waited.
func CountExpired(door string, n uint64) {
	if n > 0 {
		expired.add(door, n)
	}
}

// Expired returns the frames each door dropped at write time.
func Expired() map[string]uint64 { return expired.read() }

// The reasons a door ends a connection, for CountClosed.
const (
	// ReasonLoginTimeout: the peer did not prove who it is (hello,
	// registration, handshake, upgrade) within the door's deadline.
	ReasonLoginTimeout = "login_timeout"
	// ReasonIdle: a session that logged in sent and asked for nothing
	// within the door's idle deadline.
	ReasonIdle = "idle"
)
