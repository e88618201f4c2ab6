package edge

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// What a flood of refusals can make the log hold: per reason ("malformed
// frame", "registration refused", "over capacity", "handshake failed"),
// at most RefusalBurst lines per RefusalInterval, of which at most one
// per source address; the lines not written are counted, and the next
// line written for that reason says how many ("and N more", the
// attribute not_logged). The count is per reason, across connections and
// reconnects: a peer that reconnects after each refusal adds to the same
// count. A flood from any number of addresses writes at most
// RefusalBurst lines a second per reason.
const (
	RefusalBurst    = 5
	RefusalInterval = time.Second
	// refusalAddrs bounds the addresses remembered within one interval;
	// past it, the interval's lines are counted but no more are
	// written, so a flood from many addresses costs no more memory.
	refusalAddrs = 4096
)

// RefusalLog is the rate-limited log of refusals that every door shares.
// Its zero value is not ready: use NewRefusalLog.
type RefusalLog struct {
	log *slog.Logger

	mu      sync.Mutex
	reasons map[string]*reasonLog

	written, suppressed atomic.Uint64
}

// reasonLog is one reason's interval. Guarded by RefusalLog.mu.
type reasonLog struct {
	start     time.Time
	lines     int
	addrs     map[string]struct{}
	notLogged int // since the last line written for this reason
}

// NewRefusalLog returns a refusal log that writes to log (nil: nowhere,
// while still counting).
func NewRefusalLog(log *slog.Logger) *RefusalLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RefusalLog{log: log, reasons: map[string]*reasonLog{}}
}

// Warn writes a warning for a refusal of reason from addr (a source
// address, or "" for none), unless its reason's budget for this interval
// is spent, or addr had its line already: then it is only counted.
// args are slog's key-value pairs.
func (r *RefusalLog) Warn(reason, addr string, args ...any) {
	notLogged, ok := r.allow(reason, addr, time.Now())
	if !ok {
		r.suppressed.Add(1)
		return
	}
	r.written.Add(1)
	if addr != "" {
		args = append(args, "remote", addr)
	}
	if notLogged > 0 {
		args = append(args, "not_logged", notLogged)
	}
	r.log.Warn(reason, args...)
}

// allow takes a line of reason's budget for addr, returning how many of
// reason's lines were not written since the last one that was.
func (r *RefusalLog) allow(reason, addr string, now time.Time) (notLogged int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rl := r.reasons[reason]
	if rl == nil {
		if len(r.reasons) >= refusalAddrs {
			return 0, false // reasons are a handful; this bounds a caller's mistake
		}
		rl = &reasonLog{addrs: map[string]struct{}{}}
		r.reasons[reason] = rl
	}
	if now.Sub(rl.start) >= RefusalInterval {
		rl.start, rl.lines = now, 0
		clear(rl.addrs)
	}
	_, seen := rl.addrs[addr]
	if rl.lines >= RefusalBurst || (addr != "" && seen) || len(rl.addrs) >= refusalAddrs {
		rl.notLogged++
		return 0, false
	}
	rl.lines++
	if addr != "" {
		rl.addrs[addr] = struct{}{}
	}
	notLogged, rl.notLogged = rl.notLogged, 0
	return notLogged, true
}

// Counts returns how many refusal lines were written and how many were
// counted without being written, since the log was made.
func (r *RefusalLog) Counts() (written, suppressed uint64) {
	return r.written.Load(), r.suppressed.Load()
}

// SourceHost is the source address a refusal from a peer at a is logged
// under (RefusalLog.Warn's addr): the host of a network peer, without its
// port, so that its reconnects count as one; "" for a local peer (a Unix
// socket) or none.
func SourceHost(a net.Addr) string {
	if a == nil || a.Network() == "unix" || a.Network() == "unixpacket" {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}
