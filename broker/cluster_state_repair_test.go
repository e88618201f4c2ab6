package broker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/internal/testnats"
	"busbar/wire"
)

// TestBusStateRepairsALostWriteByDigest: a state write one broker never
// received (its subscription was gone while the write crossed, as when
// NATS drops a message) reaches it through the digests, with no broker
// joining, leaving or reconnecting: the writer's broker sees the other's
// digest differ and republishes the namespace.
func TestBusStateRepairsALostWriteByDigest(t *testing.T) {
	nc := testnats.Start(t, 3)
	start := func(i int) (*Broker, string) {
		b, secret := newTestBroker(t, Options{Name: fmt.Sprintf("b%d", i+1),
			Cluster: ClusterOptions{URLs: []string{nc.URL(i)}, Heartbeat: 100 * time.Millisecond, Lease: 500 * time.Millisecond}})
		t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
		return b, secret
	}
	b1, secret := start(0)
	b2, _ := start(1)
	pollUntil(t, 10*time.Second, "the brokers know each other", func() bool { return b1.cl.isPeer("b2") && b2.cl.isPeer("b1") })
	writer := join(t, b1, secret, "writer")
	set := func(id, key, ver string) {
		if m := writer.ask(t, wire.CmdStateSet, id, json.RawMessage(`{"ns":"home","key":"`+key+`","value":1,"ver":`+ver+`}`)); m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("set %s: %v", key, m)
		}
	}
	has := func(b *Broker, key string) bool {
		for _, s := range b.state.snapshots() {
			for _, e := range s.Entries {
				if s.NS == "home" && e.Key == key {
					return true
				}
			}
		}
		return false
	}
	set("s1", "before", "1")
	pollUntil(t, 10*time.Second, "b2 has the first write", func() bool { return has(b2, "before") })

	// b2 stops hearing state while the second write crosses.
	i := -1
	for j, s := range b2.cl.subs {
		if strings.HasPrefix(s.Subject, b2.cl.subj.state) {
			i = j
		}
	}
	if err := b2.cl.subs[i].Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := b2.cl.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	set("s2", "lost", "2")
	if err := b1.cl.nc.Flush(); err != nil { // the write has reached the server, and gone nowhere
		t.Fatal(err)
	}
	sub, err := b2.cl.nc.Subscribe(b2.cl.subj.state+"*", b2.cl.onState)
	if err != nil {
		t.Fatal(err)
	}
	b2.cl.subs[i] = sub
	pollUntil(t, 10*time.Second, "b2 has the lost write", func() bool { return has(b2, "lost") })
	if n := b1.Stats().StateRepairs; n < 1 {
		t.Fatalf("b1 republished %d namespaces on a digest", n)
	}
}

// pollUntil polls cond until it holds, failing the test after timeout.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}
