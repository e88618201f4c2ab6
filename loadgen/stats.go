package loadgen

import (
	"slices"
	"sync"
	"time"
)

// MaxSamples bounds the latency samples one run keeps (8 bytes each);
// past it, samples are kept at a stride, so percentiles stay exact up to
// it and sampled beyond.
const MaxSamples = 4 << 20

// Latency summarises per-operation latencies.
type Latency struct {
	Count int64         `json:"count"`
	Min   time.Duration `json:"min_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Recorder collects latency samples from several goroutines; the zero
// value is ready. The side-by-side harness uses it for both systems, so
// their percentiles are computed the same way.
type Recorder struct {
	mu      sync.Mutex
	samples []int64
	seen    int64
	min     int64
	max     int64
}

// Add records one operation's latency.
func (r *Recorder) Add(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := int64(d)
	if r.seen == 0 || ns < r.min {
		r.min = ns
	}
	if ns > r.max {
		r.max = ns
	}
	r.seen++
	if len(r.samples) < MaxSamples {
		r.samples = append(r.samples, ns)
	} else if r.seen%(r.seen/MaxSamples+1) == 0 {
		r.samples[r.seen%MaxSamples] = ns
	}
}

// Summary computes the percentiles; nil when nothing was recorded.
func (r *Recorder) Summary() *Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == 0 {
		return nil
	}
	s := slices.Clone(r.samples)
	slices.Sort(s)
	at := func(q float64) time.Duration { return time.Duration(s[min(len(s)-1, int(q*float64(len(s))))]) }
	return &Latency{
		Count: r.seen, Min: time.Duration(r.min), Max: time.Duration(r.max),
		P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999),
	}
}

// Result is one run's figures.
type Result struct {
	Name     string        `json:"name"`
	Msgs     int64         `json:"msgs"`
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"duration_ns"`
	MsgsPerS float64       `json:"msgs_per_s"`
	MBPerS   float64       `json:"mb_per_s"`
	Errors   int64         `json:"errors"`
	// FirstError is the text of the first failed operation, so a run
	// that failed says why and not only how often.
	FirstError string   `json:"first_error,omitempty"`
	Latency    *Latency `json:"latency,omitempty"`
	// TooShort says the run lasted less than MinRateWindow: MsgsPerS and
	// MBPerS are then zero, not a rate made of scheduling noise.
	TooShort bool `json:"too_short_to_measure,omitempty"`
}

// MinRateWindow is the shortest run a rate is computed for: below it a
// few messages over microseconds read as millions per second (60
// messages received in 10 µs are "6 M msgs/s"), which measures the clock
// and the scheduler, not the bus.
const MinRateWindow = 50 * time.Millisecond

// Rated is r as a person is shown it: a run of messages shorter than
// MinRateWindow has TooShort set and no rate. (The side-by-side harness
// keeps NewResult's rates: its quick runs compare, they do not report.)
func (r Result) Rated() Result {
	if r.Duration < MinRateWindow && r.Msgs > 0 {
		r.TooShort, r.MsgsPerS, r.MBPerS = true, 0, 0
	}
	return r
}

// NewResult computes the rates of a run (the side-by-side harness, bench/,
// computes NATS's with it too).
func NewResult(name string, msgs, bytes, errs int64, d time.Duration, lat *Latency) Result {
	r := Result{Name: name, Msgs: msgs, Bytes: bytes, Errors: errs, Duration: d, Latency: lat}
	if s := d.Seconds(); s > 0 {
		r.MsgsPerS = float64(msgs) / s
		r.MBPerS = float64(bytes) / s / 1e6
	}
	return r
}
