package main

import (
	"context"
	"os"
	"slices"
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
	p := plan{pubsubMsgs: 2000, fanoutMsgs: 1000, bigMsgs: 200, reqMsgs: 200, req16Msgs: 400, spreadMsgs: 2000, manyMsgs: 2000, frozenMsgs: frozenMsgs, idleConns: 20, straggle: time.Second,
		durableFor: 200 * time.Millisecond, durableSpread: 16, durableWindow: defaultDurableWindow, only: onlyOf(singleWorkloads)}
	var log strings.Builder
	rep, err := run(context.Background(), p, 1, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Rows) != 44 { // 12: rate, share, CPU; 13: the same for 10 and 10,000 subscriptions, and their ratio; 14: rate, p50, p99; 15: rate, p99
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

// onlyOf is a plan's only for the workloads ws.
func onlyOf(ws []string) map[string]bool {
	m := map[string]bool{}
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// TestQuickBusComparison runs workloads 9 to 11 once with small counts:
// two busbar serve --nats processes on a NATS cluster of three server
// processes, against nats.go clients on that cluster. Every request is
// answered and, at a trickle, every stream message crosses; both the
// TCP and the Unix clients of the brokers are measured, with the CPU
// time of every process, and the printed ratios are against the cluster.
func TestQuickBusComparison(t *testing.T) {
	p := plan{pubsubMsgs: 2000, reqMsgs: 200, req16Msgs: 400, straggle: time.Second, only: onlyOf(busWorkloads)}
	var log strings.Builder
	rep, err := run(context.Background(), p, 1, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Rows) != 18 {
		t.Fatalf("%d rows, want 18 (9: p50 and p99; 10: throughput and p99; 11: rate and share; the CPU of each, in all and by clients, NATS servers and brokers)", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if !strings.Contains(r.Workload, " bus ") {
			t.Errorf("workload %q ran on single servers", r.Workload)
		}
		for _, sys := range systemsOrder {
			v, ok := r.Median[sys]
			// CPU is counted in 10 ms ticks: a quick run may take none.
			if !ok || v < 0 || v == 0 && r.Unit != "µs/msg" {
				t.Errorf("%s %s: no figure for %s", r.Workload, r.Metric, sys)
			}
			if r.Metric == "delivered share" && v != 100 {
				t.Errorf("%s: %s delivered %.1f%% at a trickle", r.Workload, sys, v)
			}
		}
	}
	if !slices.Contains(rep.Notes, busNote) {
		t.Errorf("notes %q lack what 9-11 compare", rep.Notes)
	}
	for _, n := range rep.Notes {
		if strings.Contains(n, "requests failed") {
			t.Error(n)
		}
	}
	var out strings.Builder
	rep.print(&out)
	t.Log("\n" + out.String())
}
