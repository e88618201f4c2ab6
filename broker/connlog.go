package broker

import (
	"strconv"
	"sync"
	"time"

	"busbar/wire"
)

// What one connection can make the broker write to its log, and how much
// garbage it may send. A warning about a connection (a malformed frame, a
// refusal) is written at most once per connLogInterval per connection and
// kind, saying how many of that kind were suppressed since
// (suppressed_since_last, counted in Stats().LogSuppressed); a connection
// that sends MaxMalformedRun frames in a row that do not parse is closed
// (counted in Stats().GarbageClosed). docs/messaging.md#bad-input.

// connLogInterval is the least time between two warnings of one kind
// about one connection.
const connLogInterval = time.Second

// MaxMalformedRun is how many frames in a row that do not parse a
// connection may send: the last is answered MALFORMED and the connection
// closed. A frame that parses starts the count again.
const MaxMalformedRun = 64

type logKind uint8

const (
	logMalformed logKind = iota
	logRefused
	numLogKinds
)

// connLogs rate-limits the warnings about one connection.
type connLogs struct {
	mu         sync.Mutex
	last       [numLogKinds]time.Time
	suppressed [numLogKinds]int
}

// allow reports whether a warning of kind may be written now, and how
// many were suppressed since the last one.
func (l *connLogs) allow(kind logKind, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last[kind].IsZero() && now.Sub(l.last[kind]) < connLogInterval {
		l.suppressed[kind]++
		return 0, false
	}
	l.last[kind] = now
	suppressed, l.suppressed[kind] = l.suppressed[kind], 0
	return suppressed, true
}

// warnConn writes a warning about c, rate-limited per connection and kind.
//
// The warning then goes through the refusal log every door shares, under
// its peer's address: a peer that reconnects after each burst starts a
// new connection's allowance, not a new address's (edge.RefusalLog).
func (b *Broker) warnConn(c *endpoint, kind logKind, msg string, args ...any) {
	suppressed, ok := c.logs.allow(kind, time.Now())
	if !ok {
		b.stats.logSuppressed.Add(1)
		return
	}
	host := "local"
	if c.nc != nil {
		if h, local := peerAddr(c.nc); !local {
			host = h
		}
	}
	b.refusals.Warn(msg, host, append(args, "suppressed_since_last", suppressed)...)
}

// malformedFrame answers a frame of c's that does not parse, and closes c
// when it is the MaxMalformedRun-th in a row; it reports whether it did.
// Only c's reader calls it.
func (b *Broker) malformedFrame(c *conn, err error) (closed bool) {
	c.malformedRun++
	if c.malformedRun >= MaxMalformedRun {
		b.stats.garbageClosed.Add(1)
		b.refusals.Warn("closing a connection that sends only garbage", remoteHost(c.nc), "node", c.node,
			"malformed_in_a_row", c.malformedRun, "err", clip(err.Error()))
		b.answer(c, subject{kind: kindFrame}, fatal(wire.ResultMalformed,
			"closed after "+strconv.Itoa(c.malformedRun)+" frames in a row that did not parse; the last: "+err.Error()))
		return true
	}
	b.warnConn(&c.endpoint, logMalformed, "malformed frame", "node", c.node, "err", clip(err.Error()))
	b.answer(c, subject{kind: kindFrame}, refuse(wire.ResultMalformed, err.Error()))
	return false
}
