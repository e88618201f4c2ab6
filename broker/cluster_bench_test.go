package broker_test

// What crossing brokers costs: request/reply between two nodes on one
// broker, between nodes on two brokers of a bus (a three-server NATS
// cluster in this process), and, for scale, the same round trip straight
// through NATS between the same two servers. Figures in docs/cluster.md.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
)

func benchRequest(b *testing.B, alpha *client.Client) {
	ch := alpha.Scope("s").Channel("echo")
	payload := make([]byte, 128)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ch.Request(ctx, "beta", payload); err != nil {
			b.Fatal(err)
		}
	}
}

func handleEcho(b *testing.B, beta *client.Client) {
	if _, err := beta.Scope("s").Channel("echo").Handle(context.Background(), func(_ context.Context, m *client.Message) ([]byte, error) {
		return m.Payload(), nil
	}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRequestOneBroker is the round trip with both nodes on one broker.
func BenchmarkRequestOneBroker(b *testing.B) {
	e := testbroker.Start(b, "tcp", testOpts())
	alpha, beta := connect(b, e, "alpha"), connect(b, e, "beta")
	handleEcho(b, beta)
	benchRequest(b, alpha)
}

// twoBrokers is a bus of two brokers, b1 and b2, each on its own server
// of a three-server NATS cluster; with key, sharing that bus key, sealing
// if seal.
func twoBrokers(b *testing.B, key []byte, seal bool) []*testbroker.Env {
	nc := testnats.Start(b, 3)
	var envs []*testbroker.Env
	for i, name := range []string{"b1", "b2"} {
		opts := testOpts()
		opts.Name = name
		opts.Cluster.URLs = []string{nc.URL(i)}
		opts.Cluster.BusKey, opts.Cluster.SealPayloads = key, seal
		envs = append(envs, testbroker.Start(b, "tcp", opts))
	}
	return envs
}

// BenchmarkRequestAcrossBrokers is the round trip from a node on one
// broker to a node on another, each broker on its own NATS server.
func BenchmarkRequestAcrossBrokers(b *testing.B) { requestAcrossBrokers(b, nil, false) }

// BenchmarkRequestAcrossBrokersSealed is that round trip on a bus whose
// messages are sealed with a bus key (docs/cluster.md#bus-key).
func BenchmarkRequestAcrossBrokersSealed(b *testing.B) { requestAcrossBrokers(b, busKeyA, true) }

func requestAcrossBrokers(b *testing.B, key []byte, seal bool) {
	envs := twoBrokers(b, key, seal)
	alpha, beta := connect(b, envs[0], "alpha"), connect(b, envs[1], "beta")
	handleEcho(b, beta)
	testbroker.Eventually(b, busSettle, "b1 to know beta", func() bool { return where(envs[0])["beta"] == "b2" })
	benchRequest(b, alpha)
}

// natsPair starts a three-server NATS cluster and connects a client to
// each of its first two servers.
func natsPair(b *testing.B) (*nats.Conn, *nats.Conn) {
	nc := testnats.Start(b, 3)
	var conns [2]*nats.Conn
	for i := range conns {
		c, err := nats.Connect(nc.URL(i))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		conns[i] = c
	}
	return conns[0], conns[1]
}

// BenchmarkRequestNATSDirect is the same round trip with the NATS client
// alone, requester and responder on two servers of the cluster.
func BenchmarkRequestNATSDirect(b *testing.B) {
	req, rep := natsPair(b)
	if _, err := rep.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	_ = rep.Flush()
	payload := make([]byte, 128)
	testbroker.Eventually(b, busSettle, "the responder's interest to reach server 1", func() bool {
		_, err := req.Request("echo", payload, 100*time.Millisecond)
		return err == nil
	})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := req.Request("echo", payload, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// benchStream emits b.N 128-byte stream messages from alpha and waits
// until beta received them all, or reports the share that never came.
func benchStream(b *testing.B, alpha, beta *client.Client, seen func()) {
	var got atomic.Int64
	if _, err := beta.Scope("s").Channel("ticks").Subscribe(context.Background(), func(context.Context, *client.Message) { got.Add(1) }); err != nil {
		b.Fatal(err)
	}
	seen()
	ch := alpha.Scope("s").Channel("ticks")
	payload := make([]byte, 128)
	ctx := context.Background()
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := ch.Emit(ctx, payload); err != nil {
			b.Fatal(err)
		}
	}
	settle(b, &got)
}

// bigDispatch lets a subscriber queue a benchmark's burst for its
// handler instead of dropping it, as the client's own benchmark does.
func bigDispatch(o *client.Options) { o.DispatchQueue = 1 << 16 }

// settle waits until got reaches b.N, or stops growing for a second (the
// rest was dropped), and reports the share lost.
func settle(b *testing.B, got *atomic.Int64) {
	last, since := got.Load(), time.Now()
	for n := last; n < int64(b.N) && time.Since(since) < time.Second; n = got.Load() {
		if n != last {
			last, since = n, time.Now()
		}
		time.Sleep(time.Millisecond) // polling a counter, not synchronising
	}
	b.StopTimer()
	b.ReportMetric(float64(int64(b.N)-got.Load())/float64(b.N), "lost/op")
}

// BenchmarkStreamOneBroker is stream throughput between two nodes of one broker.
func BenchmarkStreamOneBroker(b *testing.B) {
	e := testbroker.Start(b, "tcp", testOpts())
	benchStream(b, connect(b, e, "alpha"), connect(b, e, "beta", bigDispatch), func() {})
}

// BenchmarkStreamAcrossBrokers is stream throughput from a node on one
// broker to a node on another.
func BenchmarkStreamAcrossBrokers(b *testing.B) { streamAcrossBrokers(b, nil, false) }

// BenchmarkStreamAcrossBrokersAuthenticated is that flow on a bus with a
// bus key, and BenchmarkStreamAcrossBrokersSealed with its messages
// sealed too (docs/cluster.md#bus-key).
func BenchmarkStreamAcrossBrokersAuthenticated(b *testing.B) { streamAcrossBrokers(b, busKeyA, false) }
func BenchmarkStreamAcrossBrokersSealed(b *testing.B)        { streamAcrossBrokers(b, busKeyA, true) }

func streamAcrossBrokers(b *testing.B, key []byte, seal bool) {
	envs := twoBrokers(b, key, seal)
	alpha, beta := connect(b, envs[0], "alpha"), connect(b, envs[1], "beta", bigDispatch)
	benchStream(b, alpha, beta, func() {
		testbroker.Eventually(b, busSettle, "b1 to know beta's subscription", func() bool {
			for _, n := range envs[0].Broker.Directory() {
				if n.Node == "beta" && len(n.Subscriptions) == 1 {
					return true
				}
			}
			return false
		})
	})
	// Where what was lost went: dropped by the sending broker (its link's
	// queue), by the receiving one (the subscriber's queue), or by NATS.
	s1, s2 := envs[0].Broker.Stats(), envs[1].Broker.Stats()
	b.ReportMetric(float64(s1.Dropped)/float64(b.N), "b1-dropped/op")
	b.ReportMetric(float64(s2.Dropped)/float64(b.N), "b2-dropped/op")
	b.ReportMetric(float64(s2.Drops[broker.DropLinkLost])/float64(b.N), "link-lost/op")
}

// BenchmarkStreamNATSDirect is the same flow with the NATS client alone,
// publisher and subscriber on two servers of the cluster.
func BenchmarkStreamNATSDirect(b *testing.B) {
	pub, sub := natsPair(b)
	var got atomic.Int64
	if _, err := sub.Subscribe("ticks", func(*nats.Msg) { got.Add(1) }); err != nil {
		b.Fatal(err)
	}
	_ = sub.Flush()
	probe, _ := sub.SubscribeSync("probe")
	_ = sub.Flush()
	testbroker.Eventually(b, busSettle, "the subscription to reach server 1", func() bool {
		_ = pub.Publish("probe", nil)
		_, err := probe.NextMsg(50 * time.Millisecond)
		return err == nil
	})
	payload := make([]byte, 128)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := pub.Publish("ticks", payload); err != nil {
			b.Fatal(err)
		}
	}
	settle(b, &got)
}
