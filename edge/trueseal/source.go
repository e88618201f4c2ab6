package trueseal

import (
	"net/netip"
	"sync"
	"time"
)

// sourceLimiter is the token bucket of each source address's pushes
// (Options.SourcePushRate, SourcePushBurst): at most MaxPushSources
// buckets of their own, and one shared by every address past them.
type sourceLimiter struct {
	rate  float64 // tokens a second; negative: no limit
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
	shared  bucket             // guarded by mu: the addresses past MaxPushSources
	swept   time.Time          // guarded by mu: the last time full buckets were forgotten
	max     int                // MaxPushSources; tests lower it
}

type bucket struct {
	tokens float64
	last   time.Time // zero: never used, full
}

func newSourceLimiter(rate float64, burst int) *sourceLimiter {
	return &sourceLimiter{rate: rate, burst: float64(burst), buckets: map[string]*bucket{}, max: MaxPushSources}
}

// take spends one token of src's bucket at now; false: src is over its
// rate, and nothing is spent.
func (l *sourceLimiter) take(src string, now time.Time) bool {
	if l.rate < 0 {
		return true
	}
	key := sourceKey(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.max {
			l.forgetFull(now)
		}
		if len(l.buckets) >= l.max {
			b = &l.shared
		} else {
			b = &bucket{}
			l.buckets[key] = b
		}
	}
	l.refill(b, now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (l *sourceLimiter) refill(b *bucket, now time.Time) {
	if b.last.IsZero() {
		b.tokens, b.last = l.burst, now
		return
	}
	if now.After(b.last) {
		b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
		b.last = now
	}
}

// forgetFull drops the buckets that have refilled to their depth
// (forgetting them grants nothing), at most once a second: a flood from
// more addresses than MaxPushSources walks the map once a second, not
// once a push.
func (l *sourceLimiter) forgetFull(now time.Time) {
	if now.Sub(l.swept) < time.Second {
		return
	}
	l.swept = now
	for k, b := range l.buckets {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// sourceKey is what a source address is counted under: an IPv4 address
// as it is, an IPv6 address by its /64 (one host's or one network's
// share, however many addresses it takes from it), anything else (a
// pipe's name) as it is.
func sourceKey(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return host
	}
	return p.String()
}
