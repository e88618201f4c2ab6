package broker

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"busbar/internal/hotpath"
	"busbar/relay"
	"busbar/wire"
)

// A connection's counts reach the figures a scrape reads only when its
// reader's batch is done: while the reader holds more frames, dispatch
// keeps counting in the connection's own fields.
func TestTrafficIsPublishedOncePerReadBatch(t *testing.T) {
	b, _ := newTestBroker(t, Options{})
	t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
	c := newConn(b, nil)
	var v hotpath.View
	frame := wire.New(wire.TypeStream, "orders").WithBody([]byte("x")).ToBytes()
	if err := hotpath.ParseView(frame, &v); err != nil {
		t.Fatal(err)
	}
	route := func() {
		c.countIn(&v, len(frame))
		c.dispatched()
	}
	c.meter.batch(true) // the reader has more frames buffered
	route()
	route()
	if got := c.meter.pubIn[MsgStream].load(); got != (Tally{}) {
		t.Fatalf("published mid-batch: %+v", got)
	}
	c.meter.batch(false) // the batch's last frame
	route()
	if got, want := c.meter.pubIn[MsgStream].load(), (Tally{3, 3 * int64(len(frame))}); got != want {
		t.Fatalf("published %+v at the batch's end, want %+v", got, want)
	}
	// Retired, the connection's counts stay in the broker's.
	b.traffic.retire(&c.meter)
	if got := b.Traffic().In[MsgStream]; got.Msgs != 3 {
		t.Fatalf("after retiring: %+v", got)
	}
	// The first routed message of a connection is sampled: its latency is
	// observed. Its channel is counted, as every message's is.
	if got := b.Traffic(); got.Channels["orders"] != 3 || got.Routing.Count != 1 {
		t.Fatalf("channels %v, routing %+v", got.Channels, got.Routing)
	}
}

func TestChannelCountsKeepAtMostMaxChannelRates(t *testing.T) {
	b, _ := newTestBroker(t, Options{})
	t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
	admit := &b.traffic.channels
	// Names are admitted first come: every scrape counts the same ones
	// apart, whatever order it reads the connections in.
	conns := make([]connChannels, MaxChannelRates/maxConnChannels+1)
	for i := range MaxChannelRates - 1 { // maxConnChannels a connection
		conns[i/maxConnChannels].count("ch"+strconv.Itoa(i), admit)
	}
	second := &conns[len(conns)-1]
	second.count("ch0", admit)
	second.count("late-1", admit) // the 256th name: admitted
	second.count("late-2", admit) // past MaxChannelRates: (other)
	conns[0].count("late-2", admit)
	got := map[string]int64{}
	for i := range conns {
		conns[i].publish()
		conns[i].each(func(ch string, n int64) { got[ch] += n })
	}
	if got["ch0"] != 2 || got["late-1"] != 1 || got["late-2"] != 0 || got[OtherChannels] != 2 {
		t.Fatalf("ch0 %d, late-1 %d, late-2 %d, other %d", got["ch0"], got["late-1"], got["late-2"], got[OtherChannels])
	}
	names := 0
	for ch := range got {
		if ch != OtherChannels {
			names++
		}
	}
	if names != MaxChannelRates {
		t.Fatalf("%d names counted apart, want %d", names, MaxChannelRates)
	}
}

// A connection counts every message by channel, keeps maxConnChannels
// apart and the rest under OtherChannels, never keeps a name that
// aliases the frame it was read from or is not a channel (such a frame
// is refused after it is counted), and its counts are read once
// published, at the end of a read batch.
func TestConnectionChannelCountsAreExactAndBounded(t *testing.T) {
	var cc connChannels
	admit := &channelRates{}
	buf := []byte("ch0")
	for range 3 {
		cc.count(unsafe.String(&buf[0], len(buf)), admit)
	}
	copy(buf, "xyz") // the read buffer reused
	got := func() map[string]int64 {
		m := map[string]int64{}
		cc.each(func(ch string, n int64) { m[ch] += n })
		return m
	}
	if got()["ch0"] != 0 {
		t.Fatal("counts read before they were published")
	}
	cc.publish()
	for i := range maxConnChannels + 2 {
		cc.count("c"+strconv.Itoa(i), admit)
	}
	cc.count("c1", admit)
	long := strings.Repeat("x", 64<<10) // a header as long as a frame may carry
	cc.count(long, admit)
	cc.count("bad channel", admit)
	cc.publish()
	m := got()
	if m["ch0"] != 3 || m["xyz"] != 0 || m["c1"] != 2 || m[OtherChannels] != 5 || len(m) != maxConnChannels+1 {
		t.Fatalf("%d kept: ch0 %d, c1 %d, other %d", len(m), m["ch0"], m["c1"], m[OtherChannels])
	}
	if _, kept := m[long]; kept {
		t.Fatal("a name that is no channel was kept")
	}
}

func TestEventsKeepTheLastRecentEvents(t *testing.T) {
	b, _ := newTestBroker(t, Options{})
	t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
	for i := range RecentEvents {
		b.events.add(Event{Kind: EventRefused, Text: strconv.Itoa(i)})
	}
	if got := b.Events(0); len(got) != RecentEvents || got[0].Seq != 1 || got[RecentEvents-1].Seq != RecentEvents {
		t.Fatalf("at the limit: %d events, first %+v", len(got), got[0])
	}
	b.events.add(Event{Kind: EventRefused, Text: "one more", Subject: string(make([]byte, maxEventText+1))})
	got := b.Events(0)
	if len(got) != RecentEvents || got[0].Seq != 2 || got[RecentEvents-1].Text != "one more" {
		t.Fatalf("past the limit: %d events, first seq %d, last %+v", len(got), got[0].Seq, got[len(got)-1])
	}
	if s := got[RecentEvents-1].Subject; len(s) != maxEventText+len("…") {
		t.Fatalf("a subject over %d bytes kept %d", maxEventText, len(s))
	}
	if after := b.Events(RecentEvents + 1); len(after) != 0 {
		t.Fatalf("nothing new, got %d", len(after))
	}
	if after := b.Events(RecentEvents); len(after) != 1 || after[0].Seq != RecentEvents+1 {
		t.Fatalf("one new: %+v", after)
	}
}

func TestHistogramBucketsAtTheirBounds(t *testing.T) {
	var h histogram
	h.observe(1e3, latencyBounds)                                   // at the first bound: first bucket
	h.observe(1e3+1, latencyBounds)                                 // just past it: the second
	h.observe(latencyBounds[len(latencyBounds)-1]+1, latencyBounds) // past the last: the overflow bucket
	h.observe(-1, latencyBounds)                                    // a clock step back counts as 0
	s := h.snapshot(latencyBounds)
	if s.Count != 4 || s.Counts[0] != 2 || s.Counts[1] != 1 || s.Counts[len(s.Counts)-1] != 1 || len(s.Counts) != len(latencyBounds)+1 {
		t.Fatalf("%+v", s)
	}
	if len(latencyBounds) > maxBuckets || len(sizeBounds) > maxBuckets {
		t.Fatalf("more bounds than a histogram has buckets")
	}
}

func TestResultCountsKeepAtMostMaxResults(t *testing.T) {
	var r resultCounts
	for i := range maxResults {
		r.add(wire.Result("R" + strconv.Itoa(i)))
	}
	r.add("ONE_TOO_MANY")
	r.add("R0")
	got := r.snapshot()
	if len(got) != maxResults || got["R0"] != 2 || got["ONE_TOO_MANY"] != 0 {
		t.Fatalf("%d results, R0 %d", len(got), got["R0"])
	}
}

// benchMeter is what counting adds to routing one stream message to one
// subscriber: classify and count it in, count it out, end its dispatch.
// held is a reader in the middle of a batch (publishing later); not held,
// every message publishes, as when the benchmark's goroutine routes.
func benchMeter(b *testing.B, held bool) {
	br, _ := newTestBroker(b, Options{})
	b.Cleanup(func() { _ = br.Shutdown(b.Context()) })
	c := newConn(br, nil)
	var v hotpath.View
	frame := wire.New(wire.TypeStream, "orders.created").WithHeader(wire.HeaderID, "0190f3a2-5b7c-7d1e-9f00-0123456789ab").
		WithHeader(wire.HeaderTTL, "30000").WithBody(make([]byte, 128)).ToBytes()
	if err := hotpath.ParseView(frame, &v); err != nil {
		b.Fatal(err)
	}
	c.meter.batch(held)
	b.ReportAllocs()
	for b.Loop() {
		c.countIn(&v, len(frame))
		c.countOut(MsgStream, len(frame))
		c.dispatched()
	}
}

func BenchmarkMeterPublishEachMessage(b *testing.B) { benchMeter(b, false) }
func BenchmarkMeterWithinABatch(b *testing.B)       { benchMeter(b, true) }

// The relay histograms read a real store: the inbox's size after each
// push, and a commit's pushes once the next commit's are answered.
func TestRelayMeterObservesInboxSizesAndCommitBatches(t *testing.T) {
	store, err := relay.Open(t.TempDir(), relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var m relayMeter
	for i := range 3 {
		if _, err := store.Push(t.Context(), "dev", []byte("blob"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		m.pushed(store, "dev") // one push per commit: each its own fsync
	}
	inbox, batch := m.inbox.snapshot(sizeBounds), m.batch.snapshot(sizeBounds)
	// Blobs 1, 2, 3: the buckets ≤1, ≤2 and ≤5.
	if inbox.Count != 3 || inbox.Counts[0] != 1 || inbox.Counts[1] != 1 || inbox.Counts[2] != 1 || inbox.Sum != 6 {
		t.Fatalf("inbox sizes: %+v", inbox)
	}
	// The third commit is observed when a fourth one begins.
	if batch.Count != 2 || batch.Counts[0] != 2 {
		t.Fatalf("commit batches: %+v", batch)
	}
}

// What exact channel counts cost a routed message: a run on one channel,
// and a connection that switches among four on every message.
func BenchmarkConnChannelCount(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(strconv.Itoa(n)+"-channels", func(b *testing.B) {
			var cc connChannels
			admit := &channelRates{}
			names := make([]string, n)
			for i := range names {
				names[i] = "telemetry.sensor-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				cc.count(names[i%n], admit)
				if i%64 == 63 {
					cc.publish() // a read batch's end
				}
			}
		})
	}
}
