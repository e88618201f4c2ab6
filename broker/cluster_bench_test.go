package broker_test

// What crossing brokers costs: request/reply between two nodes on one
// broker, between nodes on two brokers of a bus (a three-server NATS
// cluster in this process), and, for scale, the same round trip straight
// through NATS between the same two servers. Figures in docs/cluster.md.

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

// BenchmarkRequestAcrossBrokers is the round trip from a node on one
// broker to a node on another, each broker on its own NATS server.
func BenchmarkRequestAcrossBrokers(b *testing.B) {
	nc := testnats.Start(b, 3)
	var envs []*testbroker.Env
	for i, name := range []string{"b1", "b2"} {
		opts := testOpts()
		opts.Name = name
		opts.Cluster.URLs = []string{nc.URL(i)}
		envs = append(envs, testbroker.Start(b, "tcp", opts))
	}
	alpha, beta := connect(b, envs[0], "alpha"), connect(b, envs[1], "beta")
	handleEcho(b, beta)
	testbroker.Eventually(b, busSettle, "b1 to know beta", func() bool { return where(envs[0])["beta"] == "b2" })
	benchRequest(b, alpha)
}

// BenchmarkRequestNATSDirect is the same round trip with the NATS client
// alone, requester and responder on two servers of the cluster.
func BenchmarkRequestNATSDirect(b *testing.B) {
	nc := testnats.Start(b, 3)
	req, err := nats.Connect(nc.URL(0))
	if err != nil {
		b.Fatal(err)
	}
	defer req.Close()
	rep, err := nats.Connect(nc.URL(1))
	if err != nil {
		b.Fatal(err)
	}
	defer rep.Close()
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
