package hotpath

import (
	"math"
	"testing"
	"time"
)

func TestInstantRoundTripsATime(t *testing.T) {
	now := time.Now()
	for _, d := range []time.Duration{0, time.Nanosecond, -time.Nanosecond, 30 * time.Second, -time.Hour, 1000 * time.Hour} {
		want := now.Add(d)
		got := At(want).Time()
		if !got.Equal(want) {
			t.Errorf("At(now%+v).Time() = %v, want %v", d, got, want)
		}
		// The monotonic reading survives: Sub against now is exact.
		if got.Sub(now) != d {
			t.Errorf("At(now%+v).Time().Sub(now) = %v", d, got.Sub(now))
		}
	}
}

func TestZeroInstantIsNoDeadline(t *testing.T) {
	if At(time.Time{}) != 0 || !At(time.Time{}).IsZero() {
		t.Fatal("the zero time is not the zero Instant")
	}
	if !Instant(0).Time().IsZero() {
		t.Fatal("the zero Instant is not the zero time")
	}
	// The origin itself is not taken for none.
	if At(epoch).IsZero() {
		t.Fatal("the origin became the zero Instant")
	}
	if Now().IsZero() {
		t.Fatal("Now is zero")
	}
}

func TestInstantOrdersAsTimesDo(t *testing.T) {
	a := Now()
	b := a.Add(time.Millisecond)
	if !a.Before(b) || b.Before(a) || b.Sub(a) != time.Millisecond {
		t.Fatalf("a=%d b=%d", a, b)
	}
	if !a.Time().Before(b.Time()) {
		t.Fatal("times out of order")
	}
}

func TestFarInstantsSaturate(t *testing.T) {
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := At(far); got != math.MaxInt64 {
		t.Fatalf("At(year 9999) = %d, want the largest Instant", got)
	}
	if got := At(time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)); got != math.MinInt64 {
		t.Fatalf("At(year 1) = %d, want the smallest Instant", got)
	}
}
