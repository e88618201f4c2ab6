package durable

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"busbar/client"
	"busbar/seal"
	"busbar/wire"
)

// unavailable is a relay whose every receive session is refused
// UNAVAILABLE (a failure that may pass), noting when each was asked for.
type unavailable struct {
	Relay
	mu    sync.Mutex
	asked []time.Time
}

func (u *unavailable) Receive(context.Context, *seal.Identity) (Session, error) {
	u.mu.Lock()
	u.asked = append(u.asked, time.Now())
	u.mu.Unlock()
	return nil, &client.RequestError{Kind: wire.ResultUnavailable, RC: wire.RCFailure, Text: "home away"}
}

// Serve's receiver, refused again and again by a relay that is
// unavailable, asks again after ReceiveRetryMin, then twice as long each
// time, never more than ReceiveRetryMax apart, reporting each as
// StateRetrying; it does not give up. In virtual time, so the waits are
// exact.
func TestServeReceiveBackoffFromMinToMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice(t, testOpts(nil))
		r := &unavailable{Relay: newRelay(t, relayOpts())}
		if _, err := d.OnMessage(func(context.Context, Message) error { return nil }); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		retries := 0
		var mu sync.Mutex
		served := make(chan error, 1)
		go func() {
			served <- d.Serve(ctx, r, ServeOptions{OnState: func(s State) {
				if s.Kind == StateRetrying {
					mu.Lock()
					retries++
					mu.Unlock()
				}
			}})
		}()
		// 0.1 + 0.2 + … + 6.4 s is 12.7 s; then 10 s apart.
		time.Sleep(12700*time.Millisecond + 3*ReceiveRetryMax + time.Millisecond)
		synctest.Wait()
		cancel()
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		want := []time.Duration{ReceiveRetryMin}
		for w := ReceiveRetryMin * 2; len(want) < 7; w *= 2 {
			want = append(want, w)
		}
		want = append(want, ReceiveRetryMax, ReceiveRetryMax, ReceiveRetryMax)
		if len(r.asked) != len(want)+1 {
			t.Fatalf("%d sessions asked for, want %d", len(r.asked), len(want)+1)
		}
		for i, w := range want {
			if got := r.asked[i+1].Sub(r.asked[i]); got != w {
				t.Errorf("wait %d: %v, want %v", i+1, got, w)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if retries != len(r.asked) {
			t.Errorf("%d retrying states for %d refusals", retries, len(r.asked))
		}
	})
}

// What another process of the device queues is pushed by a running
// Serve at its next read of SignalFile: not before, and at most
// WatchInterval after the send. In virtual time: Serve reads the file at
// WatchInterval, 2 × WatchInterval, …; the send comes at a quarter
// interval.
func TestServeHearsAnotherProcessWithinWatchInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRelay(t, relayOpts())
		a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
		group(t, a, b)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- a.Serve(ctx, r, ServeOptions{Poll: time.Hour}) }()
		synctest.Wait() // Serve's first flush: nothing queued
		other := reopen(t, a, testOpts(nil))
		time.Sleep(WatchInterval / 4)
		send(t, other, "from another shell")
		time.Sleep(WatchInterval*3/4 - time.Nanosecond)
		synctest.Wait()
		if n := r.pushCount(); n != 0 {
			t.Fatalf("pushed %d before Serve read the signal", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := r.pushCount(); n != 1 {
			t.Fatalf("%d pushes at the signal's read, want 1", n)
		}
		cancel()
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
	})
}
