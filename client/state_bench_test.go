package client_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/state"
)

// BenchmarkStateDelta measures delta propagation: one write by the owner
// until every one of N watchers (each its own connection) has the change,
// over the Unix socket. "memory" keeps state in memory; "store" has the
// broker fsync each write to its bbolt file first.
func BenchmarkStateDelta(b *testing.B) {
	for _, store := range []bool{false, true} {
		for _, n := range []int{1, 4, 16} {
			name := fmt.Sprintf("memory/watchers=%d", n)
			if store {
				name = fmt.Sprintf("store/watchers=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				opts := broker.Options{}
				if store {
					opts.StatePath = filepath.Join(b.TempDir(), "state.db")
				}
				e := testbroker.Start(b, "unix", opts)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				owner := connect(b, e, "owner")
				ns := owner.State("bench")
				if _, err := ns.Set(ctx, "k", 0); err != nil {
					b.Fatal(err)
				}
				var watches []*client.StateWatch
				for i := range n {
					w, err := connect(b, e, fmt.Sprint("w", i)).State("bench").Watch(ctx)
					if err != nil {
						b.Fatal(err)
					}
					defer w.Close()
					watches = append(watches, w)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					if _, err := ns.Set(ctx, "k", i); err != nil {
						b.Fatal(err)
					}
					for _, w := range watches {
						select {
						case <-w.Changes():
						case <-ctx.Done():
							b.Fatal("no change")
						}
					}
				}
			})
		}
	}
}

// BenchmarkStateSnapshot10k measures a snapshot request of a namespace of
// 10,000 keys (the whole namespace encoded, sent and decoded).
func BenchmarkStateSnapshot10k(b *testing.B) {
	e := testbroker.Start(b, "unix", broker.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := connect(b, e, "owner")
	ns := c.State("big")
	for i := range 10000 {
		if _, err := ns.Set(ctx, fmt.Sprintf("key-%05d", i), map[string]int{"n": i}); err != nil {
			b.Fatal(err)
		}
	}
	var snap state.Snapshot
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if snap, err = ns.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if len(snap.Entries) != 10000 {
		b.Fatalf("%d entries", len(snap.Entries))
	}
}
