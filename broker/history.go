package broker

import (
	"sync"
	"time"
)

// The broker keeps its recent past, so that an operator's dashboard opened
// now shows the last minutes at once instead of filling from its first
// second (docs/operations.md#the-dashboard).

// HistoryInterval is how often the broker samples its figures.
const HistoryInterval = time.Second

// HistorySamples is how many samples the broker keeps: 15 minutes at
// HistoryInterval, about 100 KiB.
const HistorySamples = 900

// Sample is the broker's figures at one moment. Counts are cumulative
// since the broker started (a rate is the difference of two samples);
// latencies are of the interval before the sample, 0 when nothing was
// measured in it.
type Sample struct {
	Time        time.Time `json:"time"`
	In          int64     `json:"in"`  // messages nodes sent, heartbeats excluded
	Out         int64     `json:"out"` // messages queued for nodes, heartbeats excluded
	InBytes     int64     `json:"in_bytes"`
	OutBytes    int64     `json:"out_bytes"`
	Connections int       `json:"connections"`
	Queued      int64     `json:"queued"`         // messages in outbound queues now
	Dropped     int64     `json:"dropped"`        // every reason
	Errors      int64     `json:"request_errors"` // failed responses requesters got
	// RoutingP50, RoutingP99 and RoundTripP50 are the upper bounds, in
	// seconds, of the histogram buckets holding those quantiles of the
	// interval's sampled observations.
	RoutingP50   float64 `json:"routing_p50"`
	RoutingP99   float64 `json:"routing_p99"`
	RoundTripP50 float64 `json:"round_trip_p50"`
}

// sampleRing is a ring of the last HistorySamples samples.
type sampleRing struct {
	mu      sync.Mutex
	samples [HistorySamples]Sample
	next    int  // where the next sample goes
	full    bool // the ring has wrapped
	// The previous histograms, for the interval's quantiles; owned by the
	// sampler (takeSample).
	routing, rtt HistogramSnapshot
}

// History returns the kept samples, oldest first.
func (b *Broker) History() []Sample { return b.history.all() }

func (h *sampleRing) all() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]Sample(nil), h.samples[:h.next]...)
	}
	return append(append(make([]Sample, 0, HistorySamples), h.samples[h.next:]...), h.samples[:h.next]...)
}

func (h *sampleRing) add(s Sample) {
	h.mu.Lock()
	h.samples[h.next] = s
	h.next = (h.next + 1) % HistorySamples
	h.full = h.full || h.next == 0
	h.mu.Unlock()
}

// sampleHistory samples every HistoryInterval until Shutdown.
func (b *Broker) sampleHistory() {
	b.takeSample(time.Now())
	b.every(HistoryInterval, b.takeSample)
}

func (b *Broker) takeSample(now time.Time) {
	t := b.trafficSansChannels()
	st := b.Stats()
	s := Sample{Time: now, Connections: b.Connections(), Queued: t.Queued}
	for k := range numMsgKinds {
		if MsgKind(k) == MsgHeartbeat {
			continue
		}
		out := t.Sent(MsgKind(k))
		s.In, s.InBytes = s.In+t.In[k].Msgs, s.InBytes+t.In[k].Bytes
		s.Out, s.OutBytes = s.Out+out.Msgs, s.OutBytes+out.Bytes
	}
	for _, n := range st.Drops {
		s.Dropped += n
	}
	for _, n := range t.RequestErrors {
		s.Errors += n
	}
	h := &b.history
	s.RoutingP50 = quantileSince(t.Routing, h.routing, 0.5)
	s.RoutingP99 = quantileSince(t.Routing, h.routing, 0.99)
	s.RoundTripP50 = quantileSince(t.RoundTrip, h.rtt, 0.5)
	h.routing, h.rtt = t.Routing, t.RoundTrip
	h.add(s)
}

// quantileSince is the upper bound, in seconds, of the bucket holding the
// q-quantile of the observations in cur and not in prev; 0 when there
// are none. Past the last bound it is twice the last bound.
func quantileSince(cur, prev HistogramSnapshot, q float64) float64 {
	var total int64
	for i, c := range cur.Counts {
		total += c - at(prev.Counts, i)
	}
	if total <= 0 {
		return 0
	}
	var cum int64
	for i, c := range cur.Counts {
		cum += c - at(prev.Counts, i)
		if float64(cum) >= q*float64(total) {
			if i < len(cur.Bounds) {
				return float64(cur.Bounds[i]) / 1e9
			}
			return 2 * float64(cur.Bounds[len(cur.Bounds)-1]) / 1e9
		}
	}
	return 0
}

func at(s []int64, i int) int64 {
	if i < len(s) {
		return s[i]
	}
	return 0
}
