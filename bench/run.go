package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"busbar/loadgen"
)

// startSystems starts both server children and returns the systems to
// measure: busbar over TCP and over its Unix socket, NATS over TCP; their
// subscribers wait straggle for stragglers (idleWait when zero).
func startSystems(straggle time.Duration, jetStream bool) ([]system, func(), error) {
	if straggle <= 0 {
		straggle = idleWait
	}
	bb, err := startChild("busbar")
	if err != nil {
		return nil, nil, err
	}
	nt, err := startChild("nats")
	if err != nil {
		bb.stop()
		return nil, nil, err
	}
	stop := func() { bb.stop(); nt.stop() }
	var jsURL string
	if jetStream { // its own process, so the other workloads' NATS has no JetStream
		js, err := startChild("jetstream")
		if err != nil {
			stop()
			return nil, nil, err
		}
		jsURL = js.addrs[0]
		stop = func() { bb.stop(); nt.stop(); js.stop() }
	}
	cred, err := bb.credential()
	if err != nil {
		stop()
		return nil, nil, err
	}
	return []system{
		&busbarSystem{label: "busbar-tcp", endpoint: bb.addrs[0], cred: cred, srv: bb, straggle: straggle},
		&busbarSystem{label: "busbar-unix", endpoint: bb.addrs[1], cred: cred, srv: bb, straggle: straggle},
		&natsSystem{url: nt.addrs[0], jsURL: jsURL, srv: nt, straggle: straggle},
	}, stop, nil
}

func run(ctx context.Context, p plan, rounds int, log io.Writer) (*report, error) {
	rep := &report{Machine: machine(), When: time.Now().UTC(), Rounds: rounds}
	for round := range rounds {
		// Fresh servers per round, so no round inherits another's heap.
		if p.runsAny(singleWorkloads) {
			systems, stop, err := startSystems(p.straggle, p.runs("8") || p.runs("14"))
			if err != nil {
				return nil, err
			}
			err = runRound(ctx, p, rep, systems, round, log)
			stop()
			if err != nil {
				return nil, err
			}
		}
		if p.runsAny(busWorkloads) {
			if err := runBusRound(ctx, p, rep, round, log); err != nil {
				return nil, err
			}
		}
	}
	rep.finish()
	return rep, nil
}

func runRound(ctx context.Context, p plan, rep *report, systems []system, round int, log io.Writer) error {
	// Memory first, on fresh servers: a peak after the throughput runs
	// would measure their queues, not the idle connections.
	for _, s := range []system{systems[0], systems[2]} {
		if !p.runs("6") {
			break
		}
		if err := measureMemory(ctx, p, rep, s); err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
	}
	// Alternate the order across rounds so neither side always runs warm.
	order := systems
	if round%2 == 1 {
		order = []system{systems[2], systems[1], systems[0]}
	}
	for _, s := range order {
		fmt.Fprintf(log, "round %d: %s\n", round+1, s.name())
		if err := measure(ctx, p, rep, s, round); err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
		runtime.GC()
	}
	return nil
}

func measure(ctx context.Context, p plan, rep *report, s system, round int) error {
	sys := s.name()
	if p.runs("1") { // pub/sub 1 -> 1, 128 B
		if err := measurePubsub(ctx, rep, s, "1 pubsub 1->1 128B", p.pubsubMsgs); err != nil {
			return err
		}
	}
	if p.runs("2") { // fan-out 1 -> 4, 128 B
		_, got, err := s.pubsub(ctx, 4, 128, p.fanoutMsgs)
		if err != nil {
			return err
		}
		var agg float64
		for _, g := range got {
			agg += g.MsgsPerS
		}
		rep.record("2 fanout 1->4 128B", "delivered (all subs)", "msgs/s", "higher", sys, agg)
	}
	if p.runs("3") { // request/reply, one synchronous requester
		if err := measureRequestLatency(ctx, rep, s, "3 req/reply sync 128B", p.reqMsgs); err != nil {
			return err
		}
	}
	if p.runs("4") { // request/reply, 16 concurrent requesters
		if err := measureRequestThroughput(ctx, rep, s, "4 req/reply x16 128B", p.req16Msgs); err != nil {
			return err
		}
	}
	if p.runs("5") { // 16 KiB pub/sub
		_, got, err := s.pubsub(ctx, 1, 16<<10, p.bigMsgs)
		if err != nil {
			return err
		}
		rep.record("5 pubsub 16KiB", "delivered", "MB/s", "higher", sys, got[0].MBPerS)
	}
	if p.runs("12") { // 100 publishers, each to its own subscriber
		if err := measureSpread(ctx, p, rep, s); err != nil {
			return err
		}
	}
	if p.runs("13") { // 10 and 10,000 subscriptions on one connection
		if err := measureMany(ctx, p, rep, s, round); err != nil {
			return err
		}
	}
	if p.runs("7") { // a frozen reader beside a healthy one
		if err := measureFrozen(ctx, p, rep, s, round); err != nil {
			return err
		}
	}
	if p.runs("8") { // durable, 16 senders, fsync before every ack
		if err := measureDurable(ctx, p, rep, s); err != nil {
			return err
		}
	}
	if p.runs("14") { // durable latency, 1 sender at a fixed rate, fsync before every ack
		if err := measureDurableLatency(ctx, p, rep, s); err != nil {
			return err
		}
	}
	if p.runs("15") { // 16 concurrent requests shared by 4 workers of one group
		r, err := s.workers(ctx, 4, 16, 128, p.req16Msgs)
		if err != nil {
			return err
		}
		const workload = "15 workers 16->4 128B"
		noteFailed(rep, s, workload, r)
		rep.record(workload, "throughput", "req/s", "higher", sys, r.MsgsPerS)
		if r.Latency != nil {
			rep.record(workload, "p99", "µs", "lower", sys, float64(r.Latency.P99)/1e3)
		}
	}
	return nil
}

// measurePubsub records a 1 -> 1 flow of 128-byte messages: the rate
// delivered and the share of what was published.
func measurePubsub(ctx context.Context, rep *report, s system, workload string, msgs int64) error {
	pub, got, err := s.pubsub(ctx, 1, 128, msgs)
	if err != nil {
		return err
	}
	rep.record(workload, "delivered", "msgs/s", "higher", s.name(), got[0].MsgsPerS)
	rep.record(workload, "delivered share", "%", "higher", s.name(), 100*float64(got[0].Msgs)/float64(max(1, pub.Msgs)))
	if lost := pub.Msgs - got[0].Msgs; lost > 0 {
		rep.note(fmt.Sprintf("%s %s: %d of %d lost, %d of them dropped by the subscriber's client (its dispatch queue full), the rest before it",
			s.name(), workload, lost, pub.Msgs, got[0].Errors))
	}
	return nil
}

// measureRequestLatency records the round trip of one synchronous
// requester with 128-byte payloads.
func measureRequestLatency(ctx context.Context, rep *report, s system, workload string, msgs int64) error {
	r, err := s.request(ctx, 1, 128, msgs)
	if err != nil {
		return err
	}
	noteFailed(rep, s, workload, r)
	if r.Latency != nil {
		rep.record(workload, "p50", "µs", "lower", s.name(), float64(r.Latency.P50)/1e3)
		rep.record(workload, "p99", "µs", "lower", s.name(), float64(r.Latency.P99)/1e3)
	}
	return nil
}

// measureRequestThroughput records 16 concurrent requesters' rate and
// their round trip's p99.
func measureRequestThroughput(ctx context.Context, rep *report, s system, workload string, msgs int64) error {
	r, err := s.request(ctx, 16, 128, msgs)
	if err != nil {
		return err
	}
	noteFailed(rep, s, workload, r)
	rep.record(workload, "throughput", "req/s", "higher", s.name(), r.MsgsPerS)
	if r.Latency != nil {
		rep.record(workload, "p99", "µs", "lower", s.name(), float64(r.Latency.P99)/1e3)
	}
	return nil
}

// noteFailed notes requests that failed: a figure of the others only.
func noteFailed(rep *report, s system, workload string, r loadgen.Result) {
	if r.Errors > 0 {
		rep.note(fmt.Sprintf("%s %s: %d of %d requests failed", s.name(), workload, r.Errors, r.Errors+r.Msgs))
	}
}

// measureMemory records 6: the server's peak RSS with idle authenticated
// connections, and the growth per connection. Both busbar transports are
// served by one process, so its figures stand for both.
func measureMemory(ctx context.Context, p plan, rep *report, s system) error {
	sys := s.name()
	base, _, err := s.server().memory()
	if err != nil {
		return err
	}
	closeAll, err := s.idle(ctx, p.idleConns)
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // let the server settle
	rss, peak, err := s.server().memory()
	closeAll()
	if err != nil {
		return err
	}
	label := fmt.Sprintf("6 memory %d idle conns", p.idleConns)
	systems := []string{sys}
	if sys == "busbar-tcp" {
		systems = append(systems, "busbar-unix")
	}
	for _, name := range systems {
		rep.record(label, "peak RSS", "MiB", "lower", name, float64(peak)/(1<<20))
		rep.record(label, "per connection", "KiB", "lower", name, float64(rss-base)/float64(p.idleConns)/1024)
	}
	return nil
}
