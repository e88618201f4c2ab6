package relay

// Benchmarks of the store with real fsyncs on the test's temp dir:
//
//	go test ./relay -run '^$' -bench Push -benchtime 200000x
//
// BenchmarkPush16 is the target of the relay's push path: 16 concurrent
// senders, 128-byte blobs, an fsync before every ack. It reports pushes a
// second, pushes per fsync and the latency of Push (p50, p99).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchOptions lift the per-device limits out of the way: the benchmark
// measures the log, not the refusals.
var benchOptions = Options{MaxPushRate: -1, MaxInboxBlobs: 1 << 30, MaxInboxBytes: 1 << 40}

func benchPush(b *testing.B, senders, size int) {
	s := open(b, "", benchOptions)
	blob := make([]byte, size)
	per := max(b.N/senders, 1)
	lat := make([][]time.Duration, senders)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			device := fmt.Sprint("device-", g)
			l := make([]time.Duration, 0, per)
			for range per {
				t0 := time.Now()
				if _, err := s.Push(context.Background(), device, blob); err != nil {
					b.Error(err)
					return
				}
				l = append(l, time.Since(t0))
			}
			lat[g] = l
		}()
	}
	wg.Wait()
	reportPushes(b, s, lat, time.Since(start))
}

// reportPushes reports pushes a second, pushes per fsync and the p50 and
// p99 of the latencies each sender noted.
func reportPushes(b *testing.B, s *Store, lat [][]time.Duration, elapsed time.Duration) {
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	st := s.Stats()
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "pushes/s")
	b.ReportMetric(st.PushesPerFsync, "pushes/fsync")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

func BenchmarkPush16(b *testing.B) { benchPush(b, 16, 128) }

// BenchmarkPush1 is one sender: every push waits for its own fsync.
func BenchmarkPush1(b *testing.B) { benchPush(b, 1, 128) }

// BenchmarkPush16Max is 16 senders of the largest blob.
func BenchmarkPush16Max(b *testing.B) { benchPush(b, 16, MaxBlobBytes) }

// BenchmarkDeliver is a session reading and acking a full inbox of
// 128-byte blobs.
func BenchmarkDeliver(b *testing.B) {
	s := open(b, "", benchOptions)
	blob := make([]byte, 128)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N/16 + 1 {
				if _, err := s.Push(context.Background(), "d", blob); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ss := session(b, s, "d")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		bl, err := ss.Next(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Ack("d", bl.Seq); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen100k is a restart: Open replays a log of 100,000 blobs of
// 128 bytes in 1,000 inboxes (a quarter of them acked: 74,992 stay) into
// the index.
func BenchmarkOpen100k(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir, Options{Logger: quiet, MaxPushRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	blob := make([]byte, 128)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100_000 / 16 {
				device := fmt.Sprint("device-", (g*100_000/16+i)%1000)
				seq, err := s.Push(context.Background(), device, blob)
				if err != nil {
					b.Error(err)
					return
				}
				if i%4 == 0 {
					if err := s.Ack(device, seq); err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		s := open(b, dir, Options{})
		b.StopTimer()
		if st := s.Stats(); st.Blobs != 100_000-16*1563 {
			b.Fatalf("%d blobs after open", st.Blobs)
		}
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkPushAsync16 is BenchmarkPush16 with pipelined senders, as the
// broker serves them: each of 16 keeps 32 pushes outstanding (PushAsync,
// the next sent as soon as an answer frees a slot), so a group commit
// takes what arrived during the previous fsync. It reports pushes a
// second, pushes per fsync and the latency from push to answer.
func BenchmarkPushAsync16(b *testing.B) {
	const senders, window = 16, 32
	s := open(b, "", benchOptions)
	per := max(b.N/senders, 1)
	lat := make([][]time.Duration, senders)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.SetBytes(128)
	b.ResetTimer()
	start := time.Now()
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			device := fmt.Sprint("device-", g)
			slots := make(chan struct{}, window)
			l := make([]time.Duration, per)
			var done sync.WaitGroup
			for i := range per {
				slots <- struct{}{}
				t0 := time.Now()
				done.Add(1)
				err := s.PushAsync(device, make([]byte, 128), func(_ Seq, err error) {
					if err != nil {
						b.Error(err)
					}
					l[i] = time.Since(t0)
					<-slots
					done.Done()
				})
				if err != nil {
					b.Error(err)
					<-slots
					done.Done()
					return
				}
			}
			done.Wait()
			lat[g] = l
		}()
	}
	wg.Wait()
	reportPushes(b, s, lat, time.Since(start))
}
