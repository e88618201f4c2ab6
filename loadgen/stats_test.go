package loadgen

// Load generator statistics: latency percentiles, shares and config bounds.

import (
	"testing"
	"time"
)

func TestRecorderPercentiles(t *testing.T) {
	var r Recorder
	if r.Summary() != nil {
		t.Fatal("summary of nothing")
	}
	for i := 1000; i >= 1; i-- { // 1..1000 µs, in reverse
		r.Add(time.Duration(i) * time.Microsecond)
	}
	l := r.Summary()
	want := Latency{Count: 1000, Min: time.Microsecond, P50: 501 * time.Microsecond, P90: 901 * time.Microsecond,
		P99: 991 * time.Microsecond, P999: 1000 * time.Microsecond, Max: 1000 * time.Microsecond}
	if *l != want {
		t.Fatalf("got %+v\nwant %+v", *l, want)
	}
}

func TestShare(t *testing.T) {
	var sum int64
	for i := range 3 {
		sum += share(10, 3, i)
	}
	if sum != 10 || share(10, 3, 0) != 4 || share(10, 3, 2) != 3 || share(0, 3, 1) != -1 {
		t.Fatal("share")
	}
}

func TestConfigBounds(t *testing.T) {
	c := Config{Size: MinSize}
	if err := c.normalise(); err != nil || c.Msgs != DefaultMsgs || c.Duration != MaxDuration || c.Channel == "" {
		t.Fatalf("%+v %v", c, err)
	}
	c = Config{Size: MinSize - 1}
	if c.normalise() == nil {
		t.Fatal("size below the timestamp accepted")
	}
	c = Config{Size: MinSize, Duration: time.Hour}
	if c.normalise(); c.Duration != MaxDuration {
		t.Fatal("duration not capped")
	}
}

// Rated keeps a rate from MinRateWindow on; a shorter run with messages
// is marked TooShort, with no rate. NewResult always computes one.
func TestRatesNeedARunOfMinRateWindow(t *testing.T) {
	for _, c := range []struct {
		msgs     int64
		d        time.Duration
		tooShort bool
	}{
		{60, 10 * time.Microsecond, true},
		{1000, MinRateWindow - 1, true},
		{1000, MinRateWindow, false},
		{0, time.Microsecond, false}, // nothing to rate
	} {
		r := NewResult("sub", c.msgs, c.msgs*100, 0, c.d, nil).Rated()
		if r.TooShort != c.tooShort || (r.MsgsPerS > 0) != (c.msgs > 0 && !c.tooShort) {
			t.Errorf("%d msgs in %v: %+v", c.msgs, c.d, r)
		}
	}
	if r := NewResult("pub", 1000, 1000, 0, MinRateWindow, nil).Rated(); r.MsgsPerS != 20000 || r.MBPerS != 0.02 {
		t.Errorf("1000 msgs in 50 ms: %+v", r)
	}
	if r := NewResult("pub", 60, 60, 0, 10*time.Microsecond, nil); r.TooShort || r.MsgsPerS == 0 {
		t.Errorf("NewResult left a short run unrated: %+v", r)
	}
}
