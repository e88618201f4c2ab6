// Package testnats runs a NATS cluster inside the test process for the
// tests of brokers joined through NATS (docs/cluster.md): real
// nats-server instances on loopback ports, routed to each other, that a
// test can stop and start again to make faults. Only tests import it, so
// the busbar binary never links the NATS server.
package testnats

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Cluster is a routed cluster of in-process NATS servers.
type Cluster struct {
	Servers []*server.Server
	opts    []*server.Options
}

// Start runs n routed NATS servers on loopback and waits until a message
// published on any of them reaches a subscriber on every other; cleanup
// shuts them down. Each mod adjusts every server's options (a smaller
// max_payload, say).
func Start(t testing.TB, n int, mods ...func(*server.Options)) *Cluster {
	t.Helper()
	c := &Cluster{}
	var seed *url.URL
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("nats-%d", i+1), Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
			// NoAdvertise: a client knows only the URLs it was given, so
			// stopping its server cuts it off (a partition) instead of
			// sending it to a server it discovered.
			Cluster: server.ClusterOpts{Name: "busbar-test", Host: "127.0.0.1", Port: -1, NoAdvertise: true},
		}
		if seed != nil {
			o.Routes = []*url.URL{seed}
		}
		for _, m := range mods {
			m(o)
		}
		s := run(t, o.Clone()) // o is kept and changed below: the server reads its own copy
		if seed == nil {
			seed = &url.URL{Scheme: "nats", Host: s.ClusterAddr().String()}
		}
		// Fixed from now on, so Restart brings the server back where it was.
		o.Port = s.Addr().(*net.TCPAddr).Port
		o.Cluster.Port = s.ClusterAddr().Port
		c.Servers = append(c.Servers, s)
		c.opts = append(c.opts, o)
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	c.WaitRouted(t)
	return c
}

func run(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("%s not ready", o.ServerName)
	}
	return s
}

// URL is the client URL of server i.
func (c *Cluster) URL(i int) string { return c.Servers[i].ClientURL() }

// URLs are the client URLs of every server.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Servers))
	for i := range c.Servers {
		out[i] = c.URL(i)
	}
	return out
}

// Stop shuts server i down (its clients lose their connection).
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Restart starts server i again on its port and waits for the cluster.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.Servers[i] = run(t, c.opts[i].Clone())
	c.WaitRouted(t)
}

// WaitRouted waits until a message published on each server reaches a
// subscriber on each other server: the routes carry interest both ways.
func (c *Cluster) WaitRouted(t testing.TB) {
	t.Helper()
	conns := make([]*nats.Conn, len(c.Servers))
	for i := range c.Servers {
		nc, err := nats.Connect(c.URL(i))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	deadline := time.Now().Add(20 * time.Second)
	for i, sub := range conns {
		s, err := sub.SubscribeSync(fmt.Sprintf("testnats.ready.%d", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = sub.Flush()
		for j, pub := range conns {
			if j == i {
				continue
			}
			for {
				_ = pub.Publish(s.Subject, nil)
				_ = pub.Flush()
				if _, err := s.NextMsg(50 * time.Millisecond); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("NATS server %d never reached server %d", j+1, i+1)
				}
			}
		}
		_ = s.Unsubscribe()
	}
}
