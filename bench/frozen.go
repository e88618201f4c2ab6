package main

// Workload 7: a frozen reader. One producer publishes at full speed to a
// channel with two subscribers: a healthy one that reads everything, and
// one whose connection subscribes and then never reads again, as a peer
// whose process hung (tailscale's derp TestSendFreeze freezes one client
// the same way). The healthy subscriber is measured three times in each
// round: alone; beside a second subscriber that reads (the control: what
// delivering to a second connection costs on this machine, since the
// frozen one is delivered to as well until its buffers are full); and
// beside the frozen one. What matters is the ratios, because a stuck peer
// should not slow the others down.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"busbar/loadgen"
	"busbar/transport"
	"busbar/wire"
)

const (
	frozenWorkload = "7 frozen reader 1->1 128B"
	frozenChannel  = "bench.flow" // the channel pubsub publishes on
	frozenSize     = 128
	handshakeLimit = 5 * time.Second // bounds the frozen reader's handshake
	// frozenMsgs is the count of each run, in the full plan, the quick
	// one and the harness's test alike. It is well past what busbar lets
	// the frozen connection absorb before it counts as stuck (the
	// broker's 8 MiB queue and the sockets' buffers: measured, 35,000
	// messages of 128 B over Unix, 51,000 over TCP), and short enough
	// that the healthy subscriber's own backlog (at full speed its client
	// falls behind) stays well under the 250 ms a stuck writer may hold
	// the producer today: a run alone lasts a few tenths of a second, so
	// one hold shows in both ratios. It is below the 48 MiB of backlog at
	// which nats-server starts stalling a producer for a slow client;
	// -frozen-msgs 1000000 shows that case.
	frozenMsgs = 100_000
)

// beside is the second subscriber of a run of workload 7.
type beside int

const (
	besideNone beside = iota
	besideReader
	besideFrozen
)

func (b beside) String() string {
	return [...]string{"alone", "beside a reader", "beside a frozen reader"}[b]
}

// measureFrozen records workload 7 for s: the healthy subscriber's rate
// and latency alone, beside a reader and beside a frozen reader, and the
// ratios of the runs of the round. The order of the three runs rotates
// with the round, so none is always the first on fresh servers.
func measureFrozen(ctx context.Context, p plan, rep *report, s system, round int) error {
	var runs [3]healthy
	for i := range len(runs) {
		b := beside((i + round) % len(runs))
		h, err := healthyRun(ctx, s, p.frozenMsgs, b)
		if err != nil {
			return fmt.Errorf("healthy subscriber %v: %w", b, err)
		}
		runs[b] = h
	}
	alone, reader, frozen := runs[besideNone].got, runs[besideReader].got, runs[besideFrozen].got
	sys := s.name()
	rec := func(metric, unit, better string, v float64) {
		rep.record(frozenWorkload, metric, unit, better, sys, v)
	}
	rec("healthy rate alone", "msgs/s", "higher", alone.MsgsPerS)
	rec("healthy rate w/ reader", "msgs/s", "higher", reader.MsgsPerS)
	rec("healthy rate w/ frozen", "msgs/s", "higher", frozen.MsgsPerS)
	rec("rate frozen/alone", "x", "higher", frozen.MsgsPerS/alone.MsgsPerS)
	rec("healthy delivered w/ frozen", "%", "higher", 100*float64(frozen.Msgs)/float64(max(1, runs[besideFrozen].sent)))
	rec("healthy p50 alone", "ms", "lower", ms(alone.Latency.P50))
	rec("healthy p50 w/ frozen", "ms", "lower", ms(frozen.Latency.P50))
	rec("healthy p99 alone", "ms", "lower", ms(alone.Latency.P99))
	rec("healthy p99 w/ reader", "ms", "lower", ms(reader.Latency.P99))
	rec("healthy p99 w/ frozen", "ms", "lower", ms(frozen.Latency.P99))
	rec("p99 frozen/alone", "x", "lower", float64(frozen.Latency.P99)/float64(alone.Latency.P99))
	return nil
}

// healthy is what one run delivered to the healthy subscriber.
type healthy struct {
	sent int64
	got  loadgen.Result
}

// healthyRun publishes msgs to the healthy subscriber, with b beside it.
// A frozen reader subscribes first and is closed when the run ends; a
// reader subscribes first too (pubsub's first subscriber), so the healthy
// subscriber is second in both.
func healthyRun(ctx context.Context, s system, msgs int64, b beside) (h healthy, err error) {
	subs := 1
	switch b {
	case besideReader:
		subs = 2
	case besideFrozen:
		fc, ferr := s.freeze(ctx)
		if ferr != nil {
			return healthy{}, fmt.Errorf("frozen reader: %w", ferr)
		}
		defer func() {
			if cerr := fc.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("closing the frozen reader: %w", cerr)
			}
		}()
	}
	pub, got, err := s.pubsub(ctx, subs, frozenSize, msgs)
	if err != nil {
		return healthy{}, err
	}
	for _, g := range got {
		if g.Latency == nil {
			return healthy{}, fmt.Errorf("a subscriber received nothing (%d sent)", pub.Msgs)
		}
	}
	return healthy{sent: pub.Msgs, got: got[len(got)-1]}, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// --- busbar ---------------------------------------------------------------

// freeze opens a raw connection to the broker that says hello with the
// harness's credential, subscribes to the channel pubsub publishes on,
// and, once the broker has confirmed both, never reads again. The client
// package cannot be made to stop reading (its reader goroutine drains the
// socket into its queues), so the protocol is spoken by hand here.
func (s *busbarSystem) freeze(ctx context.Context) (io.Closer, error) {
	ep, err := transport.ParseEndpoint(s.endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, handshakeLimit)
	defer cancel()
	nc, err := transport.Dial(ctx, ep, nil)
	if err != nil {
		return nil, err
	}
	node := fmt.Sprintf("frozen%d", nodeSeq.Add(1))
	if err := busbarSubscribeRaw(nc, node, s.cred.Principal, s.cred.Secret); err != nil {
		nc.Close()
		return nil, err
	}
	return &busbarFrozen{Conn: nc, sys: s, node: node}, nil
}

// busbarFrozen is a frozen reader's connection to the broker.
type busbarFrozen struct {
	net.Conn
	sys  *busbarSystem
	node string
}

// Close closes the connection and waits until the broker's directory no
// longer lists the node, so a run after this one does not route to it.
func (f *busbarFrozen) Close() error {
	err := f.Conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeLimit)
	defer cancel()
	c, cerr := f.sys.connect(ctx, nil)
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	defer c.Close()
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		nodes, derr := c.Directory(ctx)
		if derr != nil {
			return errors.Join(err, derr)
		}
		if !slices.ContainsFunc(nodes, func(n wire.NodeInfo) bool { return n.Node == f.node }) {
			return err
		}
		time.Sleep(pause) // polling the broker's state, which decides
	}
}

// busbarSubscribeRaw reads bus.info, says hello and subscribes to
// frozenChannel on nc, then clears nc's deadline. It reads nothing past
// the broker's answer to the subscription.
func busbarSubscribeRaw(nc net.Conn, node, principal, secret string) error {
	_ = nc.SetDeadline(time.Now().Add(handshakeLimit))
	r := wire.NewReader(nc)
	info, err := readControl(r)
	if err != nil {
		return err
	}
	if info.Value(wire.HeaderCommand) != wire.CmdInfo {
		return fmt.Errorf("first frame is %q, not %s", info.Value(wire.HeaderCommand), wire.CmdInfo)
	}
	body, err := json.Marshal(wire.Hello{Node: node, Principal: principal, Secret: secret})
	if err != nil {
		return err
	}
	hello := wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).
		WithHeader(wire.HeaderID, "hello").WithBody(body)
	sub := wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "sub").WithBody([]byte(frozenChannel))
	for _, m := range []*wire.Message{hello, sub} {
		if err := writeControl(nc, m); err != nil {
			return err
		}
		a, err := readControl(r)
		if err != nil {
			return err
		}
		if rc := wire.ResponseRC(a); rc.IsError() {
			return fmt.Errorf("%s refused: rc %d %s", m.Value(wire.HeaderCommand), rc, a.Body())
		}
	}
	return nc.SetDeadline(time.Time{})
}

func writeControl(nc net.Conn, m *wire.Message) error {
	f, err := wire.AppendFrame(nil, m)
	if err != nil {
		return err
	}
	_, err = nc.Write(f)
	return err
}

// readControl reads the next frame that is not a heartbeat.
func readControl(r *wire.Reader) (*wire.Message, error) {
	for {
		m, err := r.ReadMessage()
		if err != nil || !m.IsHeartbeat() {
			return m, err
		}
	}
}

// --- NATS -------------------------------------------------------------------

// freeze opens a raw TCP connection to nats-server that sends CONNECT and
// SUB for the channel pubsub publishes on, waits for the PONG that proves
// the server processed both, and never reads again. (A nats.go handler
// that blocks would not do: nats.go's reader keeps draining the socket
// into the subscription's pending queue.)
func (s *natsSystem) freeze(ctx context.Context) (io.Closer, error) {
	u, err := url.Parse(s.url)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, handshakeLimit)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	if err := natsSubscribeRaw(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// natsSubscribeRaw speaks the NATS client protocol on nc up to the PONG
// that answers the PING after CONNECT and SUB, then clears nc's deadline.
func natsSubscribeRaw(nc net.Conn) error {
	_ = nc.SetDeadline(time.Now().Add(handshakeLimit))
	connect, err := json.Marshal(map[string]any{"user": natsUser, "pass": natsPass, "verbose": false,
		"pedantic": false, "name": "frozen", "lang": "go", "version": "raw", "protocol": 1})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(nc, "CONNECT %s\r\nSUB %s 1\r\nPING\r\n", connect, frozenChannel); err != nil {
		return err
	}
	r := bufio.NewReader(nc)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		switch line = strings.TrimSpace(line); {
		case line == "PONG":
			return nc.SetDeadline(time.Time{})
		case strings.HasPrefix(line, "-ERR"):
			return fmt.Errorf("nats-server: %s", line)
		}
		// INFO, or a PING from the server: nothing to do before PONG.
	}
}
