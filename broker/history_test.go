package broker

import (
	"testing"
	"time"
)

// The history keeps the last HistorySamples samples, oldest first, and a
// sample's latencies are those of its interval only.
func TestHistoryKeepsTheLastSamplesOldestFirst(t *testing.T) {
	var r sampleRing
	start := time.Unix(1_000_000, 0)
	if len(r.all()) != 0 {
		t.Fatal("an empty ring lists samples")
	}
	for i := range HistorySamples + 5 {
		r.add(Sample{Time: start.Add(time.Duration(i) * time.Second)})
	}
	h := r.all()
	if len(h) != HistorySamples || !h[0].Time.Equal(start.Add(5*time.Second)) || !h[len(h)-1].Time.Equal(start.Add((HistorySamples+4)*time.Second)) {
		t.Fatalf("%d samples, from %v to %v", len(h), h[0].Time, h[len(h)-1].Time)
	}
	for i := 1; i < len(h); i++ {
		if !h[i].Time.After(h[i-1].Time) {
			t.Fatalf("sample %d is not after %d", i, i-1)
		}
	}
}

func TestQuantileSinceCountsOnlyTheInterval(t *testing.T) {
	bounds := []int64{1e3, 1e6, 1e9}
	prev := HistogramSnapshot{Bounds: bounds, Counts: []int64{100, 0, 0, 0}}
	cur := HistogramSnapshot{Bounds: bounds, Counts: []int64{100, 9, 1, 0}}
	if got := quantileSince(cur, prev, 0.5); got != 1e-3 {
		t.Errorf("p50 of the interval: %v, want 1 ms (the 100 older ones are not in it)", got)
	}
	if got := quantileSince(cur, prev, 0.99); got != 1 {
		t.Errorf("p99: %v, want 1 s", got)
	}
	if got := quantileSince(prev, prev, 0.5); got != 0 {
		t.Errorf("nothing in the interval: %v", got)
	}
	over := HistogramSnapshot{Bounds: bounds, Counts: []int64{0, 0, 0, 3}}
	if got := quantileSince(over, HistogramSnapshot{}, 0.5); got != 2 {
		t.Errorf("past the last bound: %v, want twice it", got)
	}
}
