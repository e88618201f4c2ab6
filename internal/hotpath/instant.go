package hotpath

import "time"

// Instant is a point in time as nanoseconds on this process's monotonic
// clock, counted from the moment the package was initialised; the zero
// Instant means none (no deadline). It is what queues and messages keep
// for a deadline instead of a time.Time: one word with no pointer in it,
// where a time.Time is three with a *Location, and a pointer in every
// queued item or received message is one more for the garbage collector
// to follow on every cycle. Converting keeps a time.Time's monotonic
// reading both ways, so comparisons never see a wall-clock jump.
type Instant int64

// epoch is Instant's origin; it carries a monotonic reading.
var epoch = time.Now()

// At is t as an Instant; the zero time is the zero Instant. A time that
// falls on the origin itself is moved one nanosecond later, as 0 means
// none; one more than 292 years away saturates.
func At(t time.Time) Instant {
	if t.IsZero() {
		return 0
	}
	if d := t.Sub(epoch); d != 0 {
		return Instant(d)
	}
	return 1
}

// Now is the current Instant (never zero).
func Now() Instant { return At(time.Now()) }

// IsZero reports whether i is the zero Instant (none).
func (i Instant) IsZero() bool { return i == 0 }

// Time is i as a time.Time with a monotonic reading; the zero Instant is
// the zero time.
func (i Instant) Time() time.Time {
	if i == 0 {
		return time.Time{}
	}
	return epoch.Add(time.Duration(i))
}

// Before reports whether i is before j. Either may be zero: compare
// IsZero first where zero means none.
func (i Instant) Before(j Instant) bool { return i < j }

// Sub is i-j as a Duration.
func (i Instant) Sub(j Instant) time.Duration { return time.Duration(i - j) }

// Add is i moved by d.
func (i Instant) Add(d time.Duration) Instant { return i + Instant(d) }
