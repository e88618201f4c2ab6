package main

// Workload 14: durable latency at a fixed offered load that both systems
// sustain. One sender offers durableLatencyRate messages a second to one
// recipient for the plan's durableFor, each message sent at its scheduled
// time whatever the answers to the earlier ones (an open loop: a stall
// shows in the latency instead of lowering the rate), with an fsync
// before every ack as in workload 8. The latency runs from a message's
// scheduled send time to the receiver having it, so time spent queued
// behind a stall counts (no coordinated omission).
//
// busbar: a client.DurablePipe keeps the pushes outstanding without
// waiting for each answer; the receiver is workload 8's (Next, acks of
// ranges without answers). NATS: js.PublishAsync paced the same way, to
// the JetStream server of workload 8 (`sync_interval: always`), one push
// consumer acking each message.
//
// Group commit should cost latency only under load: at this rate each
// commit holds one or a few pushes, and a push waits for at most the
// fsync in progress and its own.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/client"
	"busbar/loadgen"
)

const (
	durableLatencyWorkload = "14 durable latency 1x1 2000/s"
	// durableLatencyRate is the offered load of workload 14, messages a
	// second: well below what either system sustains to one recipient
	// from one sender here.
	durableLatencyRate = 2000
	// durableLatencyPending bounds the pushes or publishes outstanding:
	// past it the sender waits (and the wait shows in the latency).
	durableLatencyPending = 256
	// durableLatencyStall is how long a JetStream publisher with
	// durableLatencyPending outstanding waits for room before its publish
	// fails: long enough that a slow fsync shows as latency, as it does
	// for busbar's sender, rather than as an error.
	durableLatencyStall = 10 * time.Second
)

// measureDurableLatency records workload 14 for s.
func measureDurableLatency(ctx context.Context, p plan, rep *report, s system) error {
	var r durableResult
	var err error
	switch sys := s.(type) {
	case *busbarSystem:
		from := 2 * (1 + p.durableSpread) // past workload 8's recipients
		if sys.name() == "busbar-unix" {
			from++
		}
		r, err = sys.durableAtRate(ctx, from, p.durableFor)
	case *natsSystem:
		r, err = sys.durableAtRate(ctx, p.durableFor)
	default:
		return fmt.Errorf("%s: no such system", s.name())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", durableLatencyWorkload, err)
	}
	w, sys := durableLatencyWorkload, s.name()
	rep.record(w, "received", "msgs/s", "higher", sys, float64(r.received)/r.elapsed.Seconds())
	if r.latency != nil {
		rep.record(w, "p50 send->handler", "µs", "lower", sys, float64(r.latency.P50)/1e3)
		rep.record(w, "p99 send->handler", "µs", "lower", sys, float64(r.latency.P99)/1e3)
	}
	if r.received != r.acked || r.refused > 0 {
		rep.note(fmt.Sprintf("%s %s: %d acked, %d received, %d refused (%v)", sys, w, r.acked, r.received, r.refused, r.firstErr))
	}
	return nil
}

// schedule calls send(i, at) for message i at its scheduled time at, rate
// a second from now for d, and returns how many it sent.
func schedule(ctx context.Context, rate int, d time.Duration, send func(i int, at time.Time) error) (int, error) {
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		if ctx.Err() != nil {
			return i, ctx.Err()
		}
		if err := send(i, at); err != nil {
			return i, err
		}
	}
	return n, nil
}

// durableAtRate runs workload 14 to recipient from of the sealed pool.
func (s *busbarSystem) durableAtRate(ctx context.Context, from int, d time.Duration) (durableResult, error) {
	ids, blobs, err := sealedBlobs(from, 1)
	if err != nil {
		return durableResult{}, err
	}
	rx, err := s.connect(ctx, nil)
	if err != nil {
		return durableResult{}, err
	}
	defer rx.Close()
	tx, err := s.connect(ctx, nil)
	if err != nil {
		return durableResult{}, err
	}
	defer tx.Close()
	sess, err := rx.DurableReceive(ctx, ids[0])
	if err != nil {
		return durableResult{}, err
	}
	rctx, stopReceiver := context.WithCancel(ctx)
	defer stopReceiver()
	var received atomic.Int64
	var got []stamp
	var rwg sync.WaitGroup
	rwg.Go(func() { got = receiveDurable(rctx, sess, 0, &received) })

	var res durableResult
	pipe := tx.DurablePipe()
	var sent []int64 // scheduled time of each push whose answer is not taken yet, in order
	var mine []stamp
	take := func() error {
		seq, err := pipe.Next(ctx)
		at := sent[0]
		sent = sent[1:]
		if err != nil {
			res.refused++
			if res.firstErr == nil {
				res.firstErr = err
			}
			var re *client.RequestError
			if !errors.As(err, &re) {
				return err
			}
			return nil
		}
		res.acked++
		mine = append(mine, stamp{0, seq, at})
		return nil
	}
	start := time.Now()
	_, err = schedule(ctx, durableLatencyRate, d, func(i int, at time.Time) error {
		for pipe.Len() >= durableLatencyPending {
			if err := take(); err != nil {
				return err
			}
		}
		if err := pipe.Send(ctx, blobs[0][i%durablePool]); err != nil {
			return err
		}
		sent = append(sent, at.UnixNano())
		return nil
	})
	for err == nil && pipe.Len() > 0 {
		err = take()
	}
	if err != nil {
		return res, err
	}
	res.elapsed = time.Since(start)
	waitFor(ctx, res.acked, &received, s.straggle)
	stopReceiver()
	rwg.Wait()
	res.received = received.Load()
	res.latency = joinStamps([][]stamp{mine}, [][]stamp{got})
	return res, nil
}

// durableAtRate runs workload 14 on JetStream.
func (s *natsSystem) durableAtRate(ctx context.Context, d time.Duration) (durableResult, error) {
	if s.jsURL == "" {
		return durableResult{}, errors.New("no JetStream server")
	}
	nc, err := nats.Connect(s.jsURL, nats.UserInfo(natsUser, natsPass), nats.MaxReconnects(0))
	if err != nil {
		return durableResult{}, err
	}
	defer nc.Close()
	var refused atomic.Int64
	var firstErr atomic.Value
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(durableLatencyPending), nats.PublishAsyncErrHandler(func(_ nats.JetStream, _ *nats.Msg, err error) {
		refused.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}))
	if err != nil {
		return durableResult{}, err
	}
	rc, err := nats.Connect(s.jsURL, nats.UserInfo(natsUser, natsPass), nats.MaxReconnects(0))
	if err != nil {
		return durableResult{}, err
	}
	defer rc.Close()
	rjs, err := rc.JetStream()
	if err != nil {
		return durableResult{}, err
	}
	jc, stop, err := startJSConsumer(js, rjs)
	if err != nil {
		return durableResult{}, err
	}
	defer stop()

	var res durableResult
	start := time.Now()
	sent, err := schedule(ctx, durableLatencyRate, d, func(_ int, at time.Time) error {
		payload := make([]byte, durableSize)
		loadgen.StampAt(payload, at.UnixNano())
		_, err := js.PublishAsync(jsSubject, payload, nats.StallWait(durableLatencyStall))
		return err
	})
	if err != nil {
		return res, err
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.elapsed = time.Since(start)
	res.refused = refused.Load()
	res.acked = int64(sent) - res.refused
	if err, ok := firstErr.Load().(error); ok {
		res.firstErr = err
	}
	waitFor(ctx, res.acked, &jc.received, s.straggle)
	res.received = jc.received.Load()
	res.latency = jc.lat.Summary()
	return res, nil
}
