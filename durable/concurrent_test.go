package durable

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Two Devices on one directory, as two processes would be: one sends
// while the other sends, flushes and receives; nothing is lost, and each
// sender's order holds.
func TestTwoDevicesOneDirectory(t *testing.T) {
	r := newRelay(t, relayOpts())
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	a2 := reopen(t, a, testOpts(nil))
	const n = 30
	var wg sync.WaitGroup
	for i, d := range []*Device{a, a2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range n {
				if _, err := d.Send(context.Background(), "home", fmt.Appendf(nil, "%d %d", i, j)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// Meanwhile a2 pushes and b receives.
	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for ctx.Err() == nil {
			if _, err := a2.Flush(ctx, r); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	stop()
	bg.Wait()
	flush(t, a, r)
	var got collector
	mustDrain(t, b, r, &got)
	next := [2]int{}
	for _, body := range got.bodies() {
		var i, j int
		fmt.Sscanf(body, "%d %d", &i, &j)
		if j != next[i] {
			t.Fatalf("from writer %d: %d after %d", i, j, next[i]-1)
		}
		next[i]++
	}
	if next != [2]int{n, n} {
		t.Fatalf("received %v", next)
	}
}

// A device.db held by another process for longer than LockTimeout is
// ErrLocked, not a hang.
func TestLockTimeout(t *testing.T) {
	a, b := newDevice(t, testOpts(nil)), newDevice(t, testOpts(nil))
	group(t, a, b)
	o := testOpts(nil)
	o.LockTimeout = 100 * time.Millisecond
	impatient := reopen(t, a, o)
	db, err := bolt.Open(filepath.Join(a.Dir(), DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = impatient.Outbox()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Outbox under a held lock: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("waited far past the timeout")
	}
	db.Close()
	if _, err := a.Send(context.Background(), "home", []byte("x")); err != nil {
		t.Fatal(err)
	}
}
