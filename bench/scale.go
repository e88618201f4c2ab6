package main

// Workloads 12 and 13: how the cost of a message grows with the number of
// connections and with the number of subscriptions. 12 runs 100
// publishers, each to its own subscriber connection on its own channel;
// 13 runs one publisher to one subscriber connection holding 10 and then
// 10,000 subscriptions on distinct wildcard-free channels, the publisher
// cycling across them. Routing by an exact channel is one map lookup in
// both servers, so 13's target is a flat cost: the same rate, and the
// same server CPU per message, at 10,000 subscriptions as at 10.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/client"
	"busbar/loadgen"
)

const (
	spreadWorkload = "12 100 pubs x 100 subs 128B"
	spreadConns    = 100 // publishers, and subscriber connections, of 12
	fewSubs        = 10
	// manySubs is 13's large case; the busbar child's MaxRegistrations is
	// raised to hold it (servers.go), NATS has no such limit by default.
	manySubs  = 10_000
	scaleSize = 128
	// subscribeAtOnce bounds the subscriptions a busbar client of 13 has
	// in flight while it sets up (each is a round trip to the broker).
	subscribeAtOnce = 32
)

func manyWorkload(subs int) string { return fmt.Sprintf("13 %d subs on 1 conn 128B", subs) }

// shape is how a run spreads its traffic: pubs publisher connections,
// subConns subscriber connections, each subscribed to perConn channels of
// its own. Publisher i publishes on channels i, i+pubs, i+2·pubs, … in
// turn, so every channel gets its share and none is published twice in a
// row by one publisher unless it owns a single channel.
type shape struct{ pubs, subConns, perConn int }

func (sh shape) channels() int { return sh.subConns * sh.perConn }

// channel is the name of channel j (a subject in NATS's terms).
func (sh shape) channel(j int) string { return fmt.Sprintf("bench.scale.%d", j) }

// ownChannels lists the channels publisher i publishes on, in turn.
func (sh shape) ownChannels(i int) []string {
	var names []string
	for j := i; j < sh.channels(); j += sh.pubs {
		names = append(names, sh.channel(j))
	}
	return names
}

// spreadRun is what a run of 12 or 13 sent and delivered.
type spreadRun struct {
	sent  int64
	got   *tally
	start time.Time     // when publishing started
	cpu   time.Duration // the server's, from the first publish to the last arrival (or the wait for stragglers)
}

// cpu is the user and system CPU time the server child has used.
func (c *child) cpu() time.Duration { return cpuTime([]int{c.cmd.Process.Pid}) }

// rate is the delivered messages per second, from the first publish to
// the last arrival: the end-to-end rate of the whole spread.
func (r spreadRun) rate() float64 {
	last := r.got.last.Load()
	if last == 0 {
		return 0
	}
	return float64(r.got.got.Load()) / time.Duration(last-r.start.UnixNano()).Seconds()
}

// tally counts what a run's subscribers received, all together.
type tally struct {
	want        int64
	got, bytes  atomic.Int64
	first, last atomic.Int64 // unix ns
	lat         loadgen.Recorder
	complete    chan struct{}
	once        sync.Once
}

func newTally(want int64) *tally { return &tally{want: want, complete: make(chan struct{})} }

// add counts one payload that arrived now.
func (t *tally) add(payload []byte) {
	now := time.Now().UnixNano()
	t.first.CompareAndSwap(0, now)
	t.last.Store(now)
	t.lat.Add(loadgen.AgeAt(payload, now))
	t.bytes.Add(int64(len(payload)))
	if t.got.Add(1) >= t.want {
		t.once.Do(func() { close(t.complete) })
	}
}

// wait waits until everything arrived, ctx ends, or idle passes with
// nothing new.
func (t *tally) wait(ctx context.Context, idle time.Duration) {
	waitCount(ctx, t.complete, &t.got, idle)
}

// result is the tally as one subscriber's Result (over first to last arrival).
func (t *tally) result() loadgen.Result {
	return loadgen.NewResult("sub", t.got.Load(), t.bytes.Load(), 0, time.Duration(t.last.Load()-t.first.Load()), t.lat.Summary())
}

// measureSpread records workload 12 for s.
func measureSpread(ctx context.Context, p plan, rep *report, s system) error {
	r, err := spreadOn(ctx, s, shape{pubs: spreadConns, subConns: spreadConns, perConn: 1}, p.spreadMsgs)
	if err != nil {
		return err
	}
	recordSpread(rep, s, spreadWorkload, r)
	return nil
}

// measureMany records workload 13 for s: fewSubs then manySubs
// subscriptions (the other way round in odd rounds), and the ratio of
// their rates.
func measureMany(ctx context.Context, p plan, rep *report, s system, round int) error {
	counts := []int{fewSubs, manySubs}
	if round%2 == 1 {
		counts = []int{manySubs, fewSubs}
	}
	rates := map[int]float64{}
	for _, n := range counts {
		r, err := spreadOn(ctx, s, shape{pubs: 1, subConns: 1, perConn: n}, p.manyMsgs)
		if err != nil {
			return fmt.Errorf("%d subscriptions: %w", n, err)
		}
		recordSpread(rep, s, manyWorkload(n), r)
		rates[n] = r.rate()
	}
	rep.record(manyWorkload(manySubs), fmt.Sprintf("rate vs %d subs", fewSubs), "x", "higher", s.name(), rates[manySubs]/rates[fewSubs])
	return nil
}

// spreadOn runs sh on s.
func spreadOn(ctx context.Context, s system, sh shape, msgs int64) (spreadRun, error) {
	r, err := s.spread(ctx, sh, scaleSize, msgs)
	if err == nil && r.got.got.Load() == 0 {
		err = fmt.Errorf("nothing delivered of %d sent", r.sent)
	}
	return r, err
}

func recordSpread(rep *report, s system, workload string, r spreadRun) {
	rep.record(workload, "delivered (all subs)", "msgs/s", "higher", s.name(), r.rate())
	rep.record(workload, "delivered share", "%", "higher", s.name(), 100*float64(r.got.got.Load())/float64(max(1, r.sent)))
	// CPU is counted in 10 ms ticks: meaningful for the full counts only.
	rep.record(workload, "server CPU", "µs/msg", "lower", s.name(), float64(r.cpu.Microseconds())/float64(max(1, r.sent)))
}

// --- busbar ---------------------------------------------------------------

func (s *busbarSystem) spread(ctx context.Context, sh shape, size int, msgs int64) (spreadRun, error) {
	t := newTally(msgs)
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	// One delivery goroutine per subscriber connection, as nats.go has
	// one per asynchronous subscription.
	for i := range sh.subConns {
		// A deep dispatch queue for bursts, as pubsub's (the NATS side's
		// channel holds every message): the client drops what finds it
		// full, and a shallower one lost 15 % over TCP, where reads come
		// in bigger bursts than one worker takes at a time.
		c, err := s.connect(ctx, func(o *client.Options) { o.DispatchQueue = 1 << 16; o.Workers = 1 })
		if err != nil {
			return spreadRun{}, err
		}
		clients = append(clients, c)
		if err := subscribeAll(ctx, c, sh, i, t); err != nil {
			return spreadRun{}, err
		}
	}
	var pubs []*client.Client
	for range sh.pubs {
		c, err := s.connect(ctx, nil)
		if err != nil {
			return spreadRun{}, err
		}
		clients = append(clients, c)
		pubs = append(pubs, c)
	}
	cpu, start := s.srv.cpu(), time.Now()
	sent, err := publishFrom(ctx, sh.pubs, msgs, size, func(i int) func(int64, []byte) error {
		var chans []*client.Channel
		for _, name := range sh.ownChannels(i) {
			chans = append(chans, pubs[i].Scope("bench").Channel(name))
		}
		return func(n int64, payload []byte) error { return chans[n%int64(len(chans))].Emit(ctx, payload) }
	})
	if err != nil {
		return spreadRun{}, err
	}
	t.wait(ctx, s.straggle)
	return spreadRun{sent: sent, got: t, start: start, cpu: s.srv.cpu() - cpu}, nil
}

// subscribeAll subscribes c, subscriber connection i of sh, to its
// channels, a few round trips at a time, every arrival counted in t.
func subscribeAll(ctx context.Context, c *client.Client, sh shape, i int, t *tally) error {
	sc := c.Scope("bench")
	recv := func(_ context.Context, m *client.Message) { t.add(m.Payload()) }
	slots := make(chan struct{}, subscribeAtOnce)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for k := range sh.perConn {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if _, err := sc.Channel(sh.channel(i*sh.perConn+k)).Subscribe(ctx, recv); err != nil {
				failed.Store(&err)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// --- NATS -------------------------------------------------------------------

func (s *natsSystem) spread(ctx context.Context, sh shape, size int, msgs int64) (spreadRun, error) {
	t := newTally(msgs)
	var conns []*nats.Conn
	quit := make(chan struct{})
	var drains sync.WaitGroup
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		close(quit)
		drains.Wait()
	}()
	// One delivery goroutine per subscriber connection, draining one Go
	// channel that all its subscriptions feed (nats.go gives each
	// callback subscription a goroutine of its own: 10,000 of them would
	// measure the Go scheduler). The channel holds the connection's whole
	// share, so the client never drops.
	perConn := int(msgs/int64(sh.subConns)) + 1
	for i := range sh.subConns {
		nc, err := s.connect()
		if err != nil {
			return spreadRun{}, err
		}
		conns = append(conns, nc)
		ch := make(chan *nats.Msg, perConn)
		for k := range sh.perConn {
			if _, err := nc.ChanSubscribe(sh.channel(i*sh.perConn+k), ch); err != nil {
				return spreadRun{}, err
			}
		}
		if err := nc.Flush(); err != nil {
			return spreadRun{}, err
		}
		drains.Go(func() {
			for {
				select {
				case m := <-ch:
					t.add(m.Data)
				case <-quit:
					return
				}
			}
		})
	}
	var pubs []*nats.Conn
	for range sh.pubs {
		nc, err := s.connect()
		if err != nil {
			return spreadRun{}, err
		}
		conns = append(conns, nc)
		pubs = append(pubs, nc)
	}
	cpu, start := s.srv.cpu(), time.Now()
	sent, err := publishFrom(ctx, sh.pubs, msgs, size, func(i int) func(int64, []byte) error {
		subjects := sh.ownChannels(i)
		return func(n int64, payload []byte) error { return pubs[i].Publish(subjects[n%int64(len(subjects))], payload) }
	})
	if err == nil { // what each publisher buffered leaves now
		for _, nc := range pubs {
			if err = nc.Flush(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return spreadRun{}, err
	}
	t.wait(ctx, s.straggle)
	return spreadRun{sent: sent, got: t, start: start, cpu: s.srv.cpu() - cpu}, nil
}

// publishFrom runs pubs publishers, one goroutine each, that share msgs
// between them: publisher i sends with the function open(i) returns, its
// n-th message stamped with the send time. It returns how many were sent,
// and the first error (which stops that publisher).
func publishFrom(ctx context.Context, pubs int, msgs int64, size int, open func(i int) func(n int64, payload []byte) error) (int64, error) {
	var sent atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for i := range pubs {
		send, quota := open(i), shareOf(msgs, pubs, i)
		wg.Go(func() {
			payload := make([]byte, size)
			for n := int64(0); n < quota && ctx.Err() == nil; n++ {
				loadgen.Stamp(payload)
				if err := send(n, payload); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return sent.Load(), *err
	}
	return sent.Load(), nil
}

// shareOf is worker i's share of n messages split over k workers.
func shareOf(n int64, k, i int) int64 {
	s := n / int64(k)
	if int64(i) < n%int64(k) {
		s++
	}
	return s
}
