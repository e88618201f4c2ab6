package broker_test

// One principal cannot log in nodes without bound: past
// MaxNodesPerPrincipal a hello is refused, so a subscribe-only principal
// cannot make a channel's publications reach more than
// MaxPublishCandidates nodes by logging in idle ones. A principal allowed
// every channel is not capped.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
)

func TestMaxNodesPerPrincipalEdge(t *testing.T) {
	const limit = 3
	e := testbroker.Start(t, "unix", broker.Options{MaxNodesPerPrincipal: limit},
		auth.Principal{Name: "sensors", Nodes: []auth.Pattern{"sensor-*"}, Permissions: auth.Permissions{Subscribe: []auth.Pattern{"config.>"}}})
	as := func(o *client.Options) {
		o.Credential.Principal = "sensors"
		o.Credential.Secret = e.Secrets["sensors"]
	}
	var nodes []*client.Client
	for i := range limit {
		c, err := dialClient(e, fmt.Sprintf("sensor-%d", i), as)
		if err != nil {
			t.Fatalf("node %d of %d: %v", i+1, limit, err)
		}
		nodes = append(nodes, c)
	}
	defer func() {
		for _, c := range nodes {
			c.Close()
		}
	}()
	if _, err := dialClient(e, "sensor-extra", as); err == nil || !strings.Contains(err.Error(), "MaxNodesPerPrincipal") {
		t.Fatalf("node %d: %v, want refused naming MaxNodesPerPrincipal", limit+1, err)
	}
	// A node that logs in again replaces itself: not counted twice.
	again, err := dialClient(e, "sensor-0", as)
	if err != nil {
		t.Fatalf("sensor-0 logging in again at the limit: %v", err)
	}
	nodes = append(nodes, again)
	// One leaves: there is room again.
	nodes[1].Close()
	testbroker.Eventually(t, 10*time.Second, "sensor-1 gone", func() bool {
		for _, n := range e.Broker.Directory() {
			if n.Node == "sensor-1" {
				return false
			}
		}
		return true
	})
	c, err := dialClient(e, "sensor-new", as)
	if err != nil {
		t.Fatalf("a node after one left: %v", err)
	}
	nodes = append(nodes, c)
	// The owner's principal, allowed every channel, is not capped.
	for i := range limit + 2 {
		c, err := dialClient(e, fmt.Sprintf("owner-%d", i))
		if err != nil {
			t.Fatalf("owner node %d: %v", i, err)
		}
		nodes = append(nodes, c)
	}
}
