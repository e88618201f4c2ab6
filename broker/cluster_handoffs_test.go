package broker_test

// The goroutine hand-offs busbar's brokers add to a request across
// brokers, counted per direction, as client/requestpath_test.go counts
// the clients'. Each wake-up of a writer goroutine is one; the NATS
// client's own (its flusher, its subscription goroutine, where onLink
// runs) are NATS's and not counted here.

import (
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/internal/testnats"
)

// quietBus is two brokers, b1 and b2, each on its own server of a
// two-server NATS cluster, with their nodes on scheme. Heartbeats to and
// from nodes are a minute apart and the brokers' lease is long, so that
// nothing but the test's traffic wakes a writer while it counts.
func quietBus(t *testing.T, scheme string) (b1, b2 *testbroker.Env) {
	t.Helper()
	nats := testnats.Start(t, 2)
	var envs []*testbroker.Env
	for i, name := range []string{"b1", "b2"} {
		opts := testOpts()
		opts.Name = name
		opts.HeartbeatInterval, opts.LeaseTimeout = time.Minute, 3*time.Minute
		opts.Cluster.URLs = []string{nats.URL(i)}
		opts.Cluster.Lease = time.Minute
		if i == 0 {
			envs = append(envs, testbroker.Start(t, scheme, opts))
		} else {
			envs = append(envs, testbroker.StartSharing(t, scheme, opts, envs[0]))
		}
	}
	return envs[0], envs[1]
}

// TestRequestAcrossBrokersHandOffs pins the writer wake-ups a request
// round trip from alpha on b1 to beta on b2 costs the two brokers, per
// direction. The request: b1's reader of alpha queues it for the link
// to b2, whose writer it wakes to publish it (the link has no socket to
// write in place); b2's link reader (onLink) routes it to beta and writes
// it to beta's socket itself. The reply goes back the same way: b2's
// reader of beta wakes the link to b1, and b1's link reader writes it to
// alpha. So each direction costs one link writer's wake-up and none of
// the destination node's writer. The bounds are upper bounds: wake-ups
// may merge (a writer still busy when the next frame comes takes it
// without another), never multiply, and nothing else wakes these
// writers while the test counts, so no load makes the test fail.
func TestRequestAcrossBrokersHandOffs(t *testing.T) {
	for _, scheme := range []string{"tcp", "unix"} {
		t.Run(scheme, func(t *testing.T) {
			b1, b2 := quietBus(t, scheme)
			alpha, beta := connect(t, b1, "alpha"), connect(t, b2, "beta")
			if _, err := beta.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
				t.Fatal(err)
			}
			testbroker.Eventually(t, busSettle, "b1 to know beta", func() bool { return where(b1)["beta"] == "b2" })
			ch := alpha.Scope("s").Channel("echo")
			request := func() {
				t.Helper()
				if _, err := ch.Request(ctxT(t, 5*time.Second), "beta", make([]byte, 128)); err != nil {
					t.Fatal(err)
				}
			}
			request() // warm: both links are open

			const n = 500
			w1, w2 := broker.WriterWakes(b1.Broker), broker.WriterWakes(b2.Broker)
			for range n {
				request()
			}
			d1, d2 := wakesSince(w1, broker.WriterWakes(b1.Broker)), wakesSince(w2, broker.WriterWakes(b2.Broker))
			t.Logf("per round trip: request b1 link %.3f, b2 beta %.3f; reply b2 link %.3f, b1 alpha %.3f (b1 %v, b2 %v)",
				perTrip(d1["link:b2"], n), perTrip(d2["beta"], n), perTrip(d2["link:b1"], n), perTrip(d1["alpha"], n), d1, d2)
			atMost := func(what string, got, want int64) {
				t.Helper()
				if got > want {
					t.Errorf("%s: %d wake-ups for %d round trips, want at most %d", what, got, n, want)
				}
			}
			atMost("request: b1's link to b2", d1["link:b2"], n)
			atMost("request: b2's writer to beta (b2's link reader writes in place)", d2["beta"], 0)
			atMost("reply: b2's link to b1", d2["link:b1"], n)
			atMost("reply: b1's writer to alpha (b1's link reader writes in place)", d1["alpha"], 0)
			for who, d := range map[string]map[string]int64{"b1": d1, "b2": d2} {
				for q, got := range d {
					if q != "link:b1" && q != "link:b2" && q != "alpha" && q != "beta" {
						atMost(who+"'s queue "+q+" (not on the path)", got, 0)
					}
				}
			}
		})
	}
}

// wakesSince is, per queue, the wake-ups in now that were not in then.
func wakesSince(then, now map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for q, w := range now {
		if w -= then[q]; w != 0 {
			d[q] = w
		}
	}
	return d
}

func perTrip(wakes int64, n int) float64 { return float64(wakes) / float64(n) }
