package broker

import (
	"strconv"
	"sync"
	"time"

	"busbar/wire"
)

// Per-principal quotas on what the relay takes: a token bucket of bytes
// per principal, so that one principal with the relay permission cannot
// take the whole store budget at the disk's pace
// (docs/durable.md#the-relay-on-the-broker-connection). A principal
// allowed every channel action (the owner's) has none, as it has no node
// cap.

// The default quota: bytes a second, sustained, and how many at once.
const (
	DefaultRelayQuotaRate  = 4 << 20
	DefaultRelayQuotaBurst = 64 << 20
)

// relayQuotas are the buckets, one per principal that pushed.
type relayQuotas struct {
	mu      sync.Mutex
	buckets map[string]*quotaBucket // principals are configured: a bounded set
}

type quotaBucket struct {
	tokens float64
	last   time.Time
}

// take spends n bytes of principal's bucket, and reports whether it had
// them (nothing is spent otherwise).
func (q *relayQuotas) take(principal string, n int, now time.Time, rate, burst float64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.buckets == nil {
		q.buckets = map[string]*quotaBucket{}
	}
	b := q.buckets[principal]
	if b == nil {
		b = &quotaBucket{tokens: burst, last: now}
		q.buckets[principal] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// relayQuota refuses a push of n bytes by c past its principal's quota,
// RATE_LIMITED (temporary).
func (b *Broker) relayQuota(c *conn, n int) *refusal {
	if c.perms == nil || !c.capped || b.opts.RelayQuotaRate < 0 {
		return nil // in-process, or a principal allowed every channel, or quotas off
	}
	if b.relayQuotas.take(c.principal, n, time.Now(), float64(b.opts.RelayQuotaRate), float64(b.opts.RelayQuotaBurst)) {
		return nil
	}
	return refuse(wire.ResultRateLimited, "principal "+c.principal+" pushed past its quota of "+
		strconv.Itoa(b.opts.RelayQuotaRate)+" bytes a second (burst "+strconv.Itoa(b.opts.RelayQuotaBurst)+") into the relay; retry later")
}
