package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" { // re-executed as a server child
		serveChild(role)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickComparison runs every workload once with small counts against
// both servers: the harness cannot rot, and both systems deliver. The
// frozen reader (7) keeps the quick run's count, so its connection does
// get stuck; its ratios are printed, not judged. A subscriber waits 1s,
// not 2s, for stragglers: at full speed a busbar subscriber may miss a
// few messages, and each such run would otherwise wait up to 4s.
func TestQuickComparison(t *testing.T) {
	p := plan{pubsubMsgs: 2000, fanoutMsgs: 1000, bigMsgs: 200, reqMsgs: 200, req16Msgs: 400, frozenMsgs: frozenMsgs, idleConns: 20, straggle: time.Second,
		durableFor: 200 * time.Millisecond, durableSpread: 16, durableWindow: defaultDurableWindow}
	var log strings.Builder
	rep, err := run(context.Background(), p, 1, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Rows) != 29 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		for _, sys := range systemsOrder {
			if _, ok := r.Median[sys]; !ok {
				t.Fatalf("%s %s: no figure for %s", r.Workload, r.Metric, sys)
			}
		}
		if r.Metric == "acked" {
			for sys, v := range r.Median {
				if v <= 0 {
					t.Errorf("%s %s: nothing acked", sys, r.Workload)
				}
			}
		}
		if r.Workload == durableSpreadWorkload && r.Metric == "refused" {
			for sys, v := range r.Median {
				if v != 0 {
					t.Errorf("%s %s: %.0f pushes refused", sys, r.Workload, v)
				}
			}
		}
		if r.Metric == "delivered share" {
			for sys, v := range r.Median {
				if v != 100 {
					t.Errorf("%s delivered %.1f%% at a trickle", sys, v)
				}
			}
		}
	}
	var out strings.Builder
	rep.print(&out)
	if !strings.Contains(out.String(), "TCP/NATS") {
		t.Fatal(out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, frozenWorkload) {
			t.Log(line)
		}
	}
	if err := rep.save(t.TempDir() + "/r.json"); err != nil {
		t.Fatal(err)
	}
}
