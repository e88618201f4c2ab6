package main

// Workload 8: durable delivery with an fsync before every ack. 16 sender
// goroutines, each on its own connection, push for a fixed time; one
// receiver per recipient takes what they push and acks it as it goes.
//
// busbar: the broker is a relay (broker.Options.RelayDir, as `busbar
// serve` embeds it); a sender pushes a sealed blob (seal.Seal of a
// 128-byte KindSync body) with client.DurablePush, answered rc 0 once the
// relay's group commit holding it has been fsynced; the recipient reads
// with client.DurableReceive, Next and Ack. Blobs are sealed before the
// clock starts, a pool of them reused (sealing costs about 0.2 ms of CPU
// each; the relay does not look past the clear header, so a reused blob
// is stored and delivered like a new one). The receiver does not open
// them (seal.Open costs about 0.17 ms each): the latency is the relay's,
// from just before the push to Next returning the blob. It is joined by
// the blob's sequence in its recipient's inbox: a sender notes the time
// before each push with the sequence the push answers, the receiver the
// time it got that sequence.
//
// NATS: a nats-server with JetStream, `sync_interval: always` (an fsync
// per write), file storage, an R1 stream; 16 publishers, each its own
// connection, calling js.Publish (answered once stored) with a 128-byte
// payload stamped with its send time; one push consumer acking each
// message explicitly.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/client"
	"busbar/loadgen"
	"busbar/seal"
	"busbar/wire"
)

const (
	durableSenders = 16
	durableSize    = 128
	durablePool    = 16 // sealed blobs per recipient, reused
	// rateBackoff is a sender's pause after a refusal before it pushes
	// again, as a durable sender keeps the entry and retries.
	rateBackoff = 10 * time.Millisecond
	// defaultDurableWindow is the pushes each sender keeps outstanding on
	// its connection (-durable-window; at most client.DurablePipeWindow).
	defaultDurableWindow = 32
)

// durableResult is one run of workload 8.
type durableResult struct {
	acked     int64 // pushes / publishes answered rc 0 / stored
	refused   int64 // pushes refused (RATE_LIMITED and others)
	elapsed   time.Duration
	received  int64
	latency   *loadgen.Latency // send -> receiver
	firstErr  error            // the first refusal, for the log
	perSecond float64
}

func (r *durableResult) finish() {
	r.perSecond = float64(r.acked) / r.elapsed.Seconds()
}

// measureDurable records workload 8 for s. busbar runs it twice: to one
// recipient, as asked, and spread over p.durableSpread recipients (each
// below the relay's per-inbox push rate); JetStream runs once and stands
// against both.
func measureDurable(ctx context.Context, p plan, rep *report, s system) error {
	sys := s.name()
	rec := func(w string, r durableResult) {
		rep.record(w, "acked", "msgs/s", "higher", sys, r.perSecond)
		if r.latency != nil {
			rep.record(w, "p50 send->handler", "µs", "lower", sys, float64(r.latency.P50)/1e3)
			rep.record(w, "p99 send->handler", "µs", "lower", sys, float64(r.latency.P99)/1e3)
		}
	}
	if bs, ok := s.(*busbarSystem); ok {
		from := 0 // busbar-tcp: recipients 0..spread; busbar-unix the next
		if sys == "busbar-unix" {
			from = 1 + p.durableSpread
		}
		for _, w := range []struct {
			name             string
			from, recipients int
		}{{durableWorkload, from, 1}, {durableSpreadWorkload, from + 1, p.durableSpread}} {
			r, err := bs.durable(ctx, w.from, w.recipients, p.durableFor, p.durableWindow)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			rec(w.name, r)
			rep.record(w.name, "refused", "pushes", "lower", sys, float64(r.refused))
			if r.received != r.acked {
				rep.note(fmt.Sprintf("%s %s: %d acked, %d received", sys, w.name, r.acked, r.received))
			}
			if r.firstErr != nil {
				rep.note(fmt.Sprintf("%s %s: %d pushes refused, the first: %v", sys, w.name, r.refused, r.firstErr))
			}
		}
		return nil
	}
	ns := s.(*natsSystem)
	if p50, err := fsyncProbe(); err == nil {
		rep.note(fmt.Sprintf("%s: a 128-byte append and fsync in the temp dir took %d µs (p50 of 200), at the start of JetStream's run", durableWorkload, p50.Microseconds()))
	}
	r, err := ns.durable(ctx, p.durableFor)
	if err != nil {
		return fmt.Errorf("%s: %w", durableWorkload, err)
	}
	if r.received != r.acked || r.refused > 0 {
		rep.note(fmt.Sprintf("%s %s: %d acked, %d received, %d refused (%v)", sys, durableWorkload, r.acked, r.received, r.refused, r.firstErr))
	}
	for _, w := range []string{durableWorkload, durableSpreadWorkload} {
		rec(w, r)
		rep.record(w, "refused", "pushes", "lower", sys, 0)
	}
	return nil
}

const (
	durableWorkload       = "8 durable x16 128B fsync"
	durableSpreadWorkload = "8b durable x16 128B fsync, spread"
)

// --- busbar ---------------------------------------------------------------

// sealedPool seals blobs once per harness process: recipients and, per
// recipient, durablePool blobs of a 128-byte body.
var sealedPool struct {
	sync.Mutex
	recipients []*seal.Identity
	blobs      [][][]byte
}

func sealedBlobs(from, n int) ([]*seal.Identity, [][][]byte, error) {
	sp := &sealedPool
	sp.Lock()
	defer sp.Unlock()
	author, err := seal.Generate()
	if err != nil {
		return nil, nil, err
	}
	for len(sp.recipients) < from+n {
		to, err := seal.Generate()
		if err != nil {
			return nil, nil, err
		}
		blobs := make([][]byte, durablePool)
		for i := range blobs {
			msg, err := seal.NewMessage(seal.KindSync, "bench", make([]byte, durableSize), time.Now())
			if err != nil {
				return nil, nil, err
			}
			if blobs[i], err = seal.Seal(author, to.Public(), msg); err != nil {
				return nil, nil, err
			}
		}
		sp.recipients = append(sp.recipients, to)
		sp.blobs = append(sp.blobs, blobs)
	}
	return sp.recipients[from : from+n], sp.blobs[from : from+n], nil
}

// stamp is a time noted against a blob's sequence in one inbox.
type stamp struct {
	inbox int
	seq   uint64
	at    int64
}

// durable runs workload 8 to the recipients from..from+recipients of
// the sealed pool: each run its own, so no run finds an inbox's push rate
// spent by another run on the same server.
func (s *busbarSystem) durable(ctx context.Context, from, recipients int, d time.Duration, window int) (durableResult, error) {
	ids, blobs, err := sealedBlobs(from, recipients)
	if err != nil {
		return durableResult{}, err
	}
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	rctx, stopReceivers := context.WithCancel(ctx)
	defer stopReceivers()
	var received atomic.Int64
	recvStamps := make([][]stamp, recipients)
	var rwg sync.WaitGroup
	defer rwg.Wait()
	defer stopReceivers()
	for i, id := range ids {
		c, err := s.connect(ctx, nil)
		if err != nil {
			return durableResult{}, err
		}
		clients = append(clients, c)
		sess, err := c.DurableReceive(ctx, id)
		if err != nil {
			return durableResult{}, err
		}
		rwg.Go(func() { recvStamps[i] = receiveDurable(rctx, sess, i, &received) })
	}
	var senders []*client.Client
	for range durableSenders {
		c, err := s.connect(ctx, nil)
		if err != nil {
			return durableResult{}, err
		}
		clients, senders = append(clients, c), append(senders, c)
	}
	var res durableResult
	var acked, refused atomic.Int64
	var errOnce sync.Once
	sendStamps := make([][]stamp, durableSenders)
	start := time.Now()
	deadline := start.Add(d)
	var swg sync.WaitGroup
	for i, c := range senders {
		swg.Go(func() {
			sendStamps[i] = pushPipelined(ctx, c, i, recipients, window, blobs, deadline, &acked, &refused, func(err error) {
				errOnce.Do(func() { res.firstErr = err })
			})
		})
	}
	swg.Wait()
	res.elapsed = time.Since(start)
	res.acked, res.refused = acked.Load(), refused.Load()
	waitFor(ctx, res.acked, &received, s.straggle)
	stopReceivers()
	rwg.Wait()
	res.received = received.Load()
	res.latency = joinStamps(sendStamps, recvStamps)
	res.finish()
	return res, nil
}

// pushPipelined is one sender: until deadline it keeps window
// pushes outstanding on its connection (a client.DurablePipe), taking each
// answer in order, and returns the time before each acknowledged push
// with the sequence it was given. A refusal is counted; once the pipe has
// drained (everything behind a refused push is refused too) the sender
// pauses rateBackoff and goes on, as a durable sender retries.
func pushPipelined(ctx context.Context, c *client.Client, i, recipients, window int, blobs [][][]byte, deadline time.Time,
	acked, refused *atomic.Int64, firstErr func(error)) []stamp {
	type sent struct {
		inbox int
		at    int64
	}
	p := c.DurablePipe()
	var fifo []sent
	var mine []stamp
	backoff := false
	for n := i; ctx.Err() == nil; {
		if !backoff && p.Len() < window && time.Now().Before(deadline) {
			inbox := n % recipients
			blob := blobs[inbox][(n/recipients)%durablePool]
			at := time.Now().UnixNano()
			if err := p.Send(ctx, blob); err != nil {
				firstErr(err)
				break
			}
			fifo = append(fifo, sent{inbox, at})
			n += durableSenders
			continue
		}
		if p.Len() == 0 {
			if !backoff {
				break // past the deadline, everything answered
			}
			time.Sleep(rateBackoff)
			backoff = false
			continue
		}
		seq, err := p.Next(ctx)
		s := fifo[0]
		fifo = fifo[1:]
		if err != nil {
			refused.Add(1)
			firstErr(err)
			var re *client.RequestError
			if !errors.As(err, &re) {
				break // not a refusal: the connection failed
			}
			backoff = true
			continue
		}
		acked.Add(1)
		mine = append(mine, stamp{s.inbox, seq, s.at})
	}
	for p.Len() > 0 { // only after a failure: the answers are not counted
		_, _ = p.Next(ctx)
	}
	return mine
}

// waitFor polls until got reaches want, ctx ends, or got has not moved
// for idle.
func waitFor(ctx context.Context, want int64, got *atomic.Int64, idle time.Duration) {
	last, moved := int64(-1), time.Now()
	for ctx.Err() == nil {
		n := got.Load()
		if n >= want {
			return
		}
		if n != last {
			last, moved = n, time.Now()
		} else if time.Since(moved) > idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// receiveDurable takes sess's blobs until ctx ends, and acks them from
// one goroutine, each ack one event of ranges that the relay does not
// answer (client.DurableSession.AckAllNoWait) naming every blob received
// since the previous ack. The relay sends at most wire.DurableWindow
// unacked. It returns when it got which sequence.
func receiveDurable(ctx context.Context, sess *client.DurableSession, inbox int, received *atomic.Int64) []stamp {
	defer sess.Close()
	acks := make(chan uint64, wire.DurableWindow)
	var wg sync.WaitGroup
	wg.Go(func() {
		batch := make([]uint64, 0, wire.DurableWindow)
		for seq := range acks {
			batch = append(batch[:0], seq)
		more:
			for len(batch) < cap(batch) {
				select {
				case seq, ok := <-acks:
					if !ok {
						break more
					}
					batch = append(batch, seq)
				default:
					break more
				}
			}
			if sess.AckAllNoWait(batch) != nil {
				return // the connection is gone
			}
		}
	})
	var got []stamp
	for {
		b, err := sess.Next(ctx)
		if err != nil {
			break
		}
		got = append(got, stamp{inbox, b.Seq, time.Now().UnixNano()})
		received.Add(1)
		acks <- b.Seq
	}
	close(acks)
	wg.Wait()
	return got
}

// joinStamps matches receipts to sends by inbox and sequence.
func joinStamps(sent, got [][]stamp) *loadgen.Latency {
	type key struct {
		inbox int
		seq   uint64
	}
	at := map[key]int64{}
	for _, ss := range sent {
		for _, s := range ss {
			at[key{s.inbox, s.seq}] = s.at
		}
	}
	var lat loadgen.Recorder
	for _, gs := range got {
		for _, g := range gs {
			if t0, ok := at[key{g.inbox, g.seq}]; ok {
				lat.Add(time.Duration(g.at - t0))
			}
		}
	}
	return lat.Summary()
}

// --- NATS JetStream ---------------------------------------------------------

const jsStream, jsSubject = "BENCH", "bench.durable"

func (s *natsSystem) durable(ctx context.Context, d time.Duration) (durableResult, error) {
	if s.jsURL == "" {
		return durableResult{}, errors.New("no JetStream server")
	}
	connect := func() (*nats.Conn, error) {
		return nats.Connect(s.jsURL, nats.UserInfo(natsUser, natsPass), nats.MaxReconnects(0))
	}
	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	cc, err := connect()
	if err != nil {
		return durableResult{}, err
	}
	conns = append(conns, cc)
	js, err := cc.JetStream()
	if err != nil {
		return durableResult{}, err
	}
	jc, stop, err := startJSConsumer(js, js)
	if err != nil {
		return durableResult{}, err
	}
	defer stop()
	received, lat := &jc.received, &jc.lat
	var pubs []nats.JetStreamContext
	for range durableSenders {
		c, err := connect()
		if err != nil {
			return durableResult{}, err
		}
		conns = append(conns, c)
		pj, err := c.JetStream()
		if err != nil {
			return durableResult{}, err
		}
		pubs = append(pubs, pj)
	}
	var res durableResult
	var acked, refused atomic.Int64
	var errOnce sync.Once
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for _, pj := range pubs {
		wg.Go(func() {
			payload := make([]byte, durableSize)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				loadgen.Stamp(payload)
				if _, err := pj.Publish(jsSubject, payload); err != nil {
					refused.Add(1)
					errOnce.Do(func() { res.firstErr = err })
					continue
				}
				acked.Add(1)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.acked, res.refused = acked.Load(), refused.Load()
	waitFor(ctx, res.acked, received, s.straggle)
	res.received = received.Load()
	res.latency = lat.Summary()
	res.finish()
	return res, nil
}

// jsConsumer is the JetStream receiver of workloads 8 and 14: a push
// consumer that acks each message explicitly and records its age.
type jsConsumer struct {
	received atomic.Int64
	lat      loadgen.Recorder
}

// startJSConsumer makes a fresh R1 file stream through js and subscribes
// to it through rjs; stop unsubscribes and deletes the stream.
func startJSConsumer(js, rjs nats.JetStreamContext) (*jsConsumer, func(), error) {
	_ = js.DeleteStream(jsStream) // a fresh stream for every run
	if _, err := js.AddStream(&nats.StreamConfig{Name: jsStream, Subjects: []string{jsSubject},
		Storage: nats.FileStorage, Replicas: 1}); err != nil {
		return nil, nil, err
	}
	jc := &jsConsumer{}
	sub, err := rjs.Subscribe(jsSubject, func(m *nats.Msg) {
		jc.lat.Add(loadgen.AgeAt(m.Data, time.Now().UnixNano()))
		jc.received.Add(1)
		_ = m.Ack()
	}, nats.ManualAck(), nats.AckExplicit(), nats.DeliverAll(), nats.MaxAckPending(1<<16))
	if err != nil {
		_ = js.DeleteStream(jsStream)
		return nil, nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	return jc, func() {
		_ = sub.Unsubscribe()
		_ = js.DeleteStream(jsStream)
	}, nil
}

// fsyncProbe times 200 appends of 128 bytes, each followed by an fsync, in
// a file of the temp dir (where the servers keep their data): what one
// fsync costs on this disk at the moment.
func fsyncProbe() (time.Duration, error) {
	f, err := os.CreateTemp("", "busbar-bench-fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var lat loadgen.Recorder
	buf := make([]byte, 128)
	for range 200 {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		lat.Add(time.Since(t0))
	}
	return lat.Summary().P50, nil
}
