package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"busbar/client"
)

func main() {
	if role := os.Getenv(envRole); role != "" {
		serveChild(role)
		return
	}
	only := flag.String("only", "", "comma-separated workload numbers to run (default all)")
	rounds := flag.Int("rounds", 3, "rounds per workload; the table shows medians")
	quick := flag.Bool("quick", false, "small counts, one round: a smoke run")
	out := flag.String("json", "results/latest.json", "write the results here as JSON (empty: do not)")
	cpuprofile := flag.String("cpuprofile", "", "write the harness's (the clients') CPU profile here")
	frozenMsgs := flag.Int64("frozen-msgs", 0, "messages per run of 7, the frozen reader (default: the plan's)")
	durableFor := flag.Duration("durable-for", 0, "how long each run of 8 pushes (default: the plan's)")
	durableSpread := flag.Int("durable-spread", 0, "recipients of 8b (default: the plan's)")
	durableWindow := flag.Int("durable-window", 0, "pushes each sender of 8 keeps outstanding, 1 to 256 (default: the plan's)")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	plan := fullPlan
	if *quick {
		plan, *rounds = quickPlan, 1
	}
	if *frozenMsgs > 0 {
		plan.frozenMsgs = *frozenMsgs
	}
	if *durableFor > 0 {
		plan.durableFor = *durableFor
	}
	if *durableSpread > 0 {
		plan.durableSpread = *durableSpread
	}
	if *durableWindow > 0 {
		plan.durableWindow = min(*durableWindow, client.DurablePipeWindow)
	}
	if *only != "" {
		plan.only = map[string]bool{}
		for _, w := range strings.Split(*only, ",") {
			plan.only[strings.TrimSpace(w)] = true
		}
	}
	rep, err := run(context.Background(), plan, *rounds, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	rep.print(os.Stdout)
	if *out != "" {
		if err := rep.save(*out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "wrote", *out)
	}
}

// plan sizes the workloads.
type plan struct {
	pubsubMsgs, fanoutMsgs, bigMsgs, reqMsgs, req16Msgs int64
	spreadMsgs, manyMsgs                                int64 // 12 in all; 13 per subscription count
	frozenMsgs                                          int64 // per run of 7 (alone, beside a reader, beside the frozen reader)
	idleConns                                           int
	durableFor                                          time.Duration   // each run of 8
	durableSpread                                       int             // recipients of 8b
	durableWindow                                       int             // pushes each sender of 8 keeps outstanding
	straggle                                            time.Duration   // a subscriber's wait for stragglers (0: idleWait)
	only                                                map[string]bool // workload numbers; nil: all
}

func (p plan) runs(n string) bool { return p.only == nil || p.only[n] }

// runsAny reports whether any of the workloads ws runs.
func (p plan) runsAny(ws []string) bool { return slices.ContainsFunc(ws, p.runs) }

// singleWorkloads run on one server of each system (run.go).
var singleWorkloads = []string{"1", "2", "3", "4", "5", "6", "7", "8", "12", "13", "14", "15"}

var (
	fullPlan  = plan{pubsubMsgs: 1_000_000, fanoutMsgs: 500_000, bigMsgs: 50_000, reqMsgs: 20_000, req16Msgs: 100_000, spreadMsgs: 500_000, manyMsgs: 500_000, frozenMsgs: frozenMsgs, idleConns: 1000, durableFor: 3 * time.Second, durableSpread: 200, durableWindow: defaultDurableWindow}
	quickPlan = plan{pubsubMsgs: 20_000, fanoutMsgs: 10_000, bigMsgs: 2_000, reqMsgs: 1_000, req16Msgs: 2_000, spreadMsgs: 20_000, manyMsgs: 20_000, frozenMsgs: frozenMsgs, idleConns: 50, durableFor: 500 * time.Millisecond, durableSpread: 40, durableWindow: defaultDurableWindow}
)

// row is one metric of one workload, measured on every system.
type row struct {
	Workload string               `json:"workload"`
	Metric   string               `json:"metric"`
	Unit     string               `json:"unit"`
	Better   string               `json:"better"` // "higher" or "lower"
	Rounds   map[string][]float64 `json:"rounds"` // system -> one value per round
	Median   map[string]float64   `json:"median"`
	Ratio    map[string]float64   `json:"ratio_vs_nats"` // busbar system -> median / nats median
}

type report struct {
	Machine string    `json:"machine"`
	When    time.Time `json:"when"`
	Rounds  int       `json:"rounds"`
	Rows    []*row    `json:"rows"`
	Notes   []string  `json:"notes,omitempty"`
}

// note keeps a remark printed under the table (once).
func (r *report) note(s string) {
	if !slices.Contains(r.Notes, s) {
		r.Notes = append(r.Notes, s)
	}
}

func (r *report) record(workload, metric, unit, better, system string, v float64) {
	for _, x := range r.Rows {
		if x.Workload == workload && x.Metric == metric {
			x.Rounds[system] = append(x.Rounds[system], v)
			return
		}
	}
	r.Rows = append(r.Rows, &row{Workload: workload, Metric: metric, Unit: unit, Better: better,
		Rounds: map[string][]float64{system: {v}}})
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func (r *report) finish() {
	for _, x := range r.Rows {
		x.Median, x.Ratio = map[string]float64{}, map[string]float64{}
		for sys, vs := range x.Rounds {
			x.Median[sys] = median(vs)
		}
		n := x.Median["nats-tcp"]
		if x.Metric == metricCPUBrokers {
			continue // NATS's side has no brokers: its figure is their idle ticks
		}
		for sys, m := range x.Median {
			if strings.HasPrefix(sys, "busbar") && n > 0 {
				x.Ratio[sys] = m / n
			}
		}
	}
}

var systemsOrder = []string{"busbar-tcp", "busbar-unix", "nats-tcp"}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%s, %d round(s), medians\n\n", r.Machine, r.Rounds)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tMETRIC\tBUSBAR TCP\tBUSBAR UNIX\tNATS TCP\tTCP/NATS\tUNIX/NATS\tBETTER")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Workload, x.Metric, x.Unit,
			num(x.Median["busbar-tcp"]), num(x.Median["busbar-unix"]), num(x.Median["nats-tcp"]),
			ratio(x.Ratio, "busbar-tcp"), ratio(x.Ratio, "busbar-unix"), x.Better)
	}
	_ = tw.Flush()
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
}

// ratio prints a row's ratio for system, "-" when it has none.
func ratio(r map[string]float64, system string) string {
	if v, ok := r[system]; ok {
		return fmt.Sprintf("%.2f", v)
	}
	return "-"
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4f", v)
}

func (r *report) save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				_, model, _ = strings.Cut(line, ": ")
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s %s/%s", strings.TrimSpace(model), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
