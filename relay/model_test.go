package relay

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// checkCounts recomputes, from the inboxes and segments, every count the
// store keeps, and compares.
func checkCounts(t testing.TB, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var c counters
	segLive := map[*segment]int{}
	segLiveBytes := map[*segment]int64{}
	for dev, ib := range s.inboxes {
		n := 0
		var last Seq
		for i, e := range ib.entries {
			if i < ib.head && !e.dead {
				t.Fatalf("%s: a live entry before the head", dev)
			}
			if e.dead {
				continue
			}
			if e.seq <= last {
				t.Fatalf("%s: seq %d after %d", dev, e.seq, last)
			}
			last = e.seq
			n++
			c.bytes += int64(e.size)
			rec := pushRecordSize(len(dev), int(e.size))
			c.liveBytes += rec
			segLive[e.seg]++
			segLiveBytes[e.seg] += rec
		}
		if n != ib.blobs {
			t.Fatalf("%s: %d live entries, the inbox counts %d", dev, n, ib.blobs)
		}
		if n > 0 {
			c.inboxes++
		}
		c.blobs += n
	}
	for _, seg := range s.segs {
		c.diskBytes += seg.size
		if seg.live != segLive[seg] || seg.liveBytes != segLiveBytes[seg] {
			t.Fatalf("segment %d counts %d live (%d bytes), holds %d (%d bytes)", seg.num, seg.live, seg.liveBytes, segLive[seg], segLiveBytes[seg])
		}
		delete(segLive, seg)
	}
	if len(segLive) > 0 {
		t.Fatal("entries in segments the store no longer has")
	}
	var pendingBytes int64
	pendingOnly := 0
	for _, ib := range s.inboxes {
		pendingBytes += ib.pendingBytes
		if ib.blobs == 0 && ib.pendingBlobs > 0 {
			pendingOnly++
		}
	}
	if pendingBytes != s.pendingBytes || pendingOnly != s.pendingOnly {
		t.Fatalf("pending %d bytes in %d inboxes with nothing else, recomputed %d in %d", s.pendingBytes, s.pendingOnly, pendingBytes, pendingOnly)
	}
	var cls [classes]classUse
	for dev, ib := range s.inboxes {
		if ib.class != classOf(dev) {
			t.Fatalf("%s: inbox of class %d, its id says %d", dev, ib.class, classOf(dev))
		}
		u := &cls[ib.class]
		u.bytes += ib.bytes
		u.pendingBytes += ib.pendingBytes
		if ib.blobs > 0 {
			u.inboxes++
		} else if ib.pendingBlobs > 0 {
			u.pendingOnly++
		}
	}
	if cls != s.classes {
		t.Fatalf("per class %+v, recomputed %+v", s.classes, cls)
	}
	k := s.counts
	if c.inboxes != k.inboxes || c.blobs != k.blobs || c.bytes != k.bytes || c.liveBytes != k.liveBytes || c.diskBytes != k.diskBytes {
		t.Fatalf("counts %+v, recomputed %+v", k, c)
	}
}

// TestAgainstAModel runs random pushes, acks (some by the wrong device),
// clock moves past TTLs, sweeps and restarts on a store with tiny segments,
// and compares every inbox with a model after each restart and now and
// then in between.
func TestAgainstAModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			clk := newClock()
			dir := t.TempDir()
			opts := Options{Now: clk.Now, TTL: time.Hour, SegmentBytes: 2048, MaxPushRate: -1, MaxInboxBlobs: 40}
			s := open(t, dir, opts)
			type blob struct {
				want
				pushed time.Time
			}
			model := map[string][]blob{}
			devices := []string{"a", "b", "c", "d", "x.e"} // "x.e": an edge inbox, of the other budget
			sweepModel := func() {
				for d, bs := range model {
					model[d] = slices.DeleteFunc(bs, func(b blob) bool { return !clk.Now().Before(b.pushed.Add(opts.TTL)) })
				}
			}
			compare := func(when string) {
				t.Helper()
				checkCounts(t, s)
				for _, dev := range devices {
					var w []want
					for _, b := range model[dev] {
						if clk.Now().Before(b.pushed.Add(opts.TTL)) {
							w = append(w, b.want)
						}
					}
					got := inboxOf(t, s, dev)
					if len(got) != len(w) {
						t.Fatalf("%s: %s holds %d blobs, the model %d", when, dev, len(got), len(w))
					}
					for i := range w {
						if got[i].Seq != w[i].seq || string(got[i].Data) != string(w[i].data) {
							t.Fatalf("%s: %s blob %d is seq %d, the model's %d", when, dev, i, got[i].Seq, w[i].seq)
						}
					}
				}
				sweepModel() // reading deleted the expired ones
			}
			for op := range 1500 {
				dev := devices[r.IntN(len(devices))]
				switch k := r.IntN(100); {
				case k < 55:
					data := randomBytes(r, 1+r.IntN(200))
					seq, err := s.Push(ctx(t), dev, data)
					if len(model[dev]) >= opts.MaxInboxBlobs {
						if err == nil {
							t.Fatalf("op %d: push past the inbox limit taken", op)
						}
						continue
					}
					if err != nil {
						t.Fatalf("op %d: %v", op, err)
					}
					model[dev] = append(model[dev], blob{want{seq, data}, clk.Now()})
				case k < 85 && len(model[dev]) > 0:
					i := r.IntN(len(model[dev]))
					seq := model[dev][i].seq
					other := devices[(slices.Index(devices, dev)+1)%len(devices)]
					if err := s.Ack(other, seq); err == nil {
						t.Fatalf("op %d: %s acked %s's blob", op, other, dev)
					}
					// An expired blob not yet swept may be acked too; either
					// way it is gone.
					if err := s.Ack(dev, seq); err != nil && clk.Now().Before(model[dev][i].pushed.Add(opts.TTL)) {
						t.Fatalf("op %d: ack of seq %d: %v", op, seq, err)
					}
					model[dev] = slices.Delete(model[dev], i, i+1)
				case k < 90:
					clk.Add(time.Duration(r.IntN(20)) * time.Minute)
				case k < 93:
					s.sweep()
					sweepModel()
				case k < 95:
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = open(t, dir, opts)
					compare(fmt.Sprint("after the restart at op ", op))
				case k < 97:
					compare(fmt.Sprint("op ", op))
				}
			}
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
			compare("at the end")
			st := s.Stats()
			t.Logf("%d pushes since the last open, %d segments, %d bytes on disk for %d live, %d copied forward", st.Pushes, st.Segments, st.DiskBytes, st.LiveBytes, st.Copied)
		})
	}
}

// Acks that land while the writer copies the same blobs forward: the
// sync hook, which runs between planning a copy and applying it, acks a
// blob every time. Deleted blobs stay deleted after a restart, and the
// counts stay right.
func TestAcksWhileCopyingForward(t *testing.T) {
	dir := t.TempDir()
	var s *Store
	r := rand.New(rand.NewPCG(5, 5))
	var mu sync.Mutex
	var live []Seq // guarded by mu
	hook := &hooks{sync: func(f *os.File, _ []Seq) error {
		mu.Lock()
		defer mu.Unlock()
		if len(live) > 0 && r.IntN(8) == 0 { // rarely enough that old segments keep live blobs to copy
			i := r.IntN(len(live))
			if s.Ack("offline", live[i]) == nil {
				live = slices.Delete(live, i, i+1)
			}
		}
		return syncData(f)
	}}
	opts := Options{SegmentBytes: 2048, MaxPushRate: -1, hooks: hook}
	s = open(t, dir, opts)
	for i := range 800 {
		if i%4 == 0 {
			seq := push(t, s, "offline", []byte(fmt.Sprint("kept ", i)))
			mu.Lock()
			live = append(live, seq)
			mu.Unlock()
			continue
		}
		seq := push(t, s, "online", make([]byte, 64))
		if err := s.Ack("online", seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	before := inboxOf(t, s, "offline")
	st := s.Stats()
	if st.Copied == 0 {
		t.Fatal("nothing was copied forward")
	}
	s.Close()
	s = open(t, dir, Options{SegmentBytes: 2048})
	checkCounts(t, s)
	after := inboxOf(t, s, "offline")
	if len(after) != len(before) {
		t.Fatalf("%d blobs after the restart, %d before", len(after), len(before))
	}
	for i := range after {
		if after[i].Seq != before[i].Seq || string(after[i].Data) != string(before[i].Data) {
			t.Fatalf("blob %d: seq %d after the restart, %d before", i, after[i].Seq, before[i].Seq)
		}
	}
}
