package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"busbar/client"
	"busbar/loadgen"
)

// benchIdle is how long `bench sub` and `bench pubsub` wait for a straggler
// before reporting what arrived.
const benchIdle = 2 * time.Second

func init() {
	addVerb(runBench, []helpPage{
		{path: "bench", summary: "generate load on a running broker and measure it: pub, sub, pubsub, req",
			text: `Load generators in the spirit of nats bench. Every run is bounded by
--msgs and --duration (at most 10m) and stops by itself. Publishers write
the send time in the payload, so latency is measured per message. The
table has one row per role: messages, seconds, rate, errors and latency
percentiles in µs (--json, --csv for scripts).`,
			exit:    "0  the run completed\n1  an operation failed (the first failure is named on stderr), a subscriber\n   received fewer messages than were sent (or, for sub, than --msgs), or\n   the run could not start\n2  usage",
			example: "$ busbar bench pubsub --subs 2 --msgs 20000\n$ busbar bench req --clients 2 --concurrency 8"},
		{path: "bench pub", args: "[CHANNEL]", summary: "publishers emit stream messages (fire and forget)",
			text: "--clients publishers send --msgs messages of --size bytes on CHANNEL (default bench).", example: "$ busbar bench pub --msgs 50000"},
		{path: "bench sub", args: "[CHANNEL]", summary: "one subscriber counts and times what arrives",
			text: "Waits for the first message, then reports after --msgs messages or 2 s of silence.\nFewer than --msgs messages is a shortfall: it is named on stderr and the exit status is 1.", example: "$ busbar bench sub"},
		{path: "bench pubsub", args: "[CHANNEL]", summary: "--subs subscribers, then the publishers, in one command",
			text: "Starts --subs subscribers, then --clients publishers, and reports both sides.\nA subscriber that received fewer messages than were sent is named on stderr\nand the exit status is 1: a stream is best effort, and a lossy run must not\nread as a clean one.", example: "$ busbar bench pubsub --subs 4"},
		{path: "bench req", args: "[CHANNEL]", summary: "requesters against --target's handler, or an echo replier it starts",
			text: "--clients × --concurrency requests in flight; each round trip is timed.", example: "$ busbar bench req --concurrency 8"},
	})
}

func runBench(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "bench", args); !ok {
		return code
	}
	switch args[0] {
	case "pub":
		return benchPub(args[1:], stdio)
	case "sub":
		return benchSub(args[1:], stdio)
	case "pubsub":
		return benchPubSub(args[1:], stdio)
	case "req":
		return benchReq(args[1:], stdio)
	}
	return exitUsage // not reached: pickSubcommand knows the workloads
}

// benchFlags are the flags every workload takes.
type benchFlags struct {
	v        *verbSetup
	size     *int
	msgs     *int64
	duration *time.Duration
	clients  *int
	asJSON   *bool
	asCSV    *bool
	endBar   func() // ends the progress bar's line, if one is drawn
}

func newBench(name string, stdio IO) *benchFlags {
	v := newVerb("bench "+name, func(n int) bool { return n <= 1 }, stdio)
	return &benchFlags{
		v:        v,
		size:     v.fs.Int("size", 128, "payload bytes (at least 8: the send timestamp)"),
		msgs:     v.fs.Int64("msgs", loadgen.DefaultMsgs, "messages in total (0: until --duration)"),
		duration: v.fs.Duration("duration", 0, "stop after this long (at most 10m)"),
		clients:  v.fs.Int("clients", 1, "connections generating load"),
		asJSON:   v.fs.Bool("json", false, "print the results as JSON"),
		asCSV:    v.fs.Bool("csv", false, "print the results as CSV"),
	}
}

func (f *benchFlags) config(stdio IO, total int64) loadgen.Config {
	cfg := loadgen.Config{Channel: "bench", Size: *f.size, Msgs: *f.msgs, Duration: *f.duration}
	if len(f.v.args) > 0 {
		cfg.Channel = f.v.args[0]
	}
	if isTerminal(stdio.Stderr) && !*f.asJSON && !*f.asCSV {
		cfg.Progress, f.endBar = progressBar(stdio.Stderr, total, *f.duration)
	}
	return cfg
}

// connectN opens n clients named <base>-<i>.
func (f *benchFlags) connectN(ctx context.Context, n int, base string, tune func(*client.Options)) ([]*client.Client, error) {
	var out []*client.Client
	for i := range n {
		opts, err := f.v.conn.options()
		if err != nil {
			closeAll(out)
			return nil, err
		}
		opts.Node = fmt.Sprintf("%s-%d-%d", base, os.Getpid(), i)
		if tune != nil {
			tune(&opts)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := client.Connect(cctx, opts)
		cancel()
		err = connectError(err, opts.Server)
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func closeAll(cs []*client.Client) {
	for _, c := range cs {
		c.Close()
	}
}

// subscriberOptions let a counting subscriber keep up with a burst.
func subscriberOptions(o *client.Options) { o.DispatchQueue = 1 << 16 }

func benchPub(args []string, stdio IO) int {
	f := newBench("pub", stdio)
	if !f.v.parse(args) {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	pubs, err := f.connectN(ctx, *f.clients, "bench-pub", nil)
	if err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	defer closeAll(pubs)
	res, err := loadgen.Publish(ctx, pubs, f.config(stdio, *f.msgs))
	if err != nil {
		return f.v.fail(stdio, err, exitUsage)
	}
	return f.print(stdio, []loadgen.Result{res})
}

func benchSub(args []string, stdio IO) int {
	f := newBench("sub", stdio)
	if !f.v.parse(args) {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	cs, err := f.connectN(ctx, 1, "bench-sub", subscriberOptions)
	if err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	defer closeAll(cs)
	cfg := f.config(stdio, *f.msgs)
	s, err := loadgen.Subscribe(ctx, cs[0], cfg, *f.msgs)
	if err != nil {
		return f.v.fail(stdio, err, requestExit(err))
	}
	fmt.Fprintln(stdio.Stderr, "busbar bench sub: subscribed to", cfg.Channel)
	wctx, cancel := context.WithTimeout(ctx, cmpDuration(*f.duration, loadgen.MaxDuration))
	defer cancel()
	// Wait for the first message as long as the run may last, then for stragglers.
	for s.Received() == 0 && wctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	r := s.Wait(wctx, benchIdle)
	code := f.print(stdio, []loadgen.Result{r})
	if *f.msgs > 0 && r.Msgs < *f.msgs {
		fmt.Fprintf(stdio.Stderr, "busbar bench sub: received %d of the %d messages expected (--msgs; %d missing)\n", r.Msgs, *f.msgs, *f.msgs-r.Msgs)
		code = exitFail
	}
	return code
}

func benchPubSub(args []string, stdio IO) int {
	f := newBench("pubsub", stdio)
	subs := f.v.fs.Int("subs", 1, "subscribers, one connection each")
	if !f.v.parse(args) {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	cfg := f.config(stdio, *f.msgs)
	subClients, err := f.connectN(ctx, *subs, "bench-sub", subscriberOptions)
	if err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	defer closeAll(subClients)
	var counters []*loadgen.Subscriber
	for _, c := range subClients {
		s, err := loadgen.Subscribe(ctx, c, cfg, *f.msgs)
		if err != nil {
			return f.v.fail(stdio, err, requestExit(err))
		}
		counters = append(counters, s)
	}
	pubs, err := f.connectN(ctx, *f.clients, "bench-pub", nil)
	if err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	defer closeAll(pubs)
	res, err := loadgen.Publish(ctx, pubs, cfg)
	if err != nil {
		return f.v.fail(stdio, err, exitUsage)
	}
	results := []loadgen.Result{res}
	for i, s := range counters {
		r := s.Wait(ctx, benchIdle)
		r.Name = "sub-" + strconv.Itoa(i)
		results = append(results, r)
	}
	code := f.print(stdio, results)
	for _, line := range shortfalls(res, results[1:]) {
		fmt.Fprintf(stdio.Stderr, "busbar bench pubsub: %s\n", line)
		code = exitFail
	}
	return code
}

// shortfalls says, per subscriber that received fewer messages than the
// publishers sent, how many it missed: a stream is best effort, and a
// run that lost messages must not read as a clean one.
func shortfalls(sent loadgen.Result, subs []loadgen.Result) []string {
	var out []string
	for _, r := range subs {
		if r.Msgs < sent.Msgs {
			out = append(out, fmt.Sprintf("%s received %d of the %d messages sent (%d missing)", r.Name, r.Msgs, sent.Msgs, sent.Msgs-r.Msgs))
		}
	}
	return out
}

func benchReq(args []string, stdio IO) int {
	f := newBench("req", stdio)
	concurrency := f.v.fs.Int("concurrency", 1, "requests in flight per client")
	target := f.v.fs.String("target", "", "node whose handler answers (default: start an echo replier)")
	if !f.v.parse(args) {
		return exitUsage
	}
	ctx, stop := signalContext()
	defer stop()
	cfg := f.config(stdio, *f.msgs)
	if *target == "" {
		rep, err := f.connectN(ctx, 1, "bench-reply", nil)
		if err != nil {
			return f.v.fail(stdio, err, exitFail)
		}
		defer closeAll(rep)
		if _, err := loadgen.Echo(ctx, rep[0], cfg.Channel); err != nil {
			return f.v.fail(stdio, err, requestExit(err))
		}
		*target = rep[0].Node()
	}
	reqs, err := f.connectN(ctx, *f.clients, "bench-req", nil)
	if err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	defer closeAll(reqs)
	res, err := loadgen.Request(ctx, reqs, *target, *concurrency, cfg)
	if err != nil {
		return f.v.fail(stdio, err, exitUsage)
	}
	return f.print(stdio, []loadgen.Result{res})
}

// print writes the results as a table, JSON or CSV.
func (f *benchFlags) print(stdio IO, results []loadgen.Result) int {
	if f.endBar != nil {
		f.endBar() // the table starts on a line of its own
	}
	for i := range results {
		results[i] = results[i].Rated()
	}
	switch {
	case *f.asJSON:
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
	case *f.asCSV:
		w := csv.NewWriter(stdio.Stdout)
		_ = w.Write([]string{"name", "msgs", "bytes", "seconds", "msgs_per_s", "mb_per_s", "errors", "lat_min_us", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us"})
		for _, r := range results {
			row := []string{r.Name, itoa(r.Msgs), itoa(r.Bytes), ftoa(r.Duration.Seconds()), ftoa(r.MsgsPerS), ftoa(r.MBPerS), itoa(r.Errors)}
			row = append(row, latencyCells(r.Latency)...)
			_ = w.Write(row)
		}
		w.Flush()
	default:
		tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "NAME\tMSGS\tSECONDS\tMSGS/S\tMB/S\tERRORS\tMIN µs\tP50 µs\tP90 µs\tP99 µs\tP99.9 µs\tMAX µs\t")
		for _, r := range results {
			rate, mb := strconv.FormatFloat(r.MsgsPerS, 'f', 0, 64), strconv.FormatFloat(r.MBPerS, 'f', 2, 64)
			if r.TooShort {
				rate, mb = "-", "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%s\t%s\t%d\t", r.Name, r.Msgs, r.Duration.Seconds(), rate, mb, r.Errors)
			for _, c := range latencyCells(r.Latency) {
				fmt.Fprintf(tw, "%s\t", cmpOr(c, "-"))
			}
			fmt.Fprintln(tw)
		}
		_ = tw.Flush()
	}
	for _, r := range results {
		if r.TooShort {
			fmt.Fprintf(stdio.Stderr, "busbar bench: %s: %d messages in %v are too few to measure a rate (a run under %v); send more with --msgs\n",
				r.Name, r.Msgs, r.Duration, loadgen.MinRateWindow)
		}
		if r.FirstError != "" {
			fmt.Fprintf(stdio.Stderr, "busbar bench: %s: %d failed, the first with: %s\n", r.Name, r.Errors, r.FirstError)
		}
	}
	for _, r := range results {
		if r.Errors > 0 {
			return exitFail
		}
	}
	return exitOK
}

func latencyCells(l *loadgen.Latency) []string {
	if l == nil {
		return []string{"", "", "", "", "", ""}
	}
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }
	return []string{us(l.Min), us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max)}
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 || d > def {
		return def
	}
	return d
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws a one-line bar on a terminal, once the run has lasted
// a second: update redraws it, end finishes its line (if one was drawn)
// so what follows starts on a line of its own. The run is as far along
// as the nearer of its limits, --msgs or --duration.
func progressBar(w io.Writer, total int64, duration time.Duration) (update func(int64), end func()) {
	start, drawn := time.Now(), false
	update = func(done int64) {
		elapsed := time.Since(start)
		if elapsed < time.Second {
			return
		}
		frac := 0.0
		if total > 0 {
			frac = float64(done) / float64(total)
		}
		if duration > 0 {
			frac = max(frac, elapsed.Seconds()/duration.Seconds())
		}
		frac = min(frac, 1)
		drawn = true
		const width = 30
		filled := int(frac * width)
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = '.'
			if i < filled {
				bar[i] = '#'
			}
		}
		fmt.Fprintf(w, "\r[%s] %3.0f%%  %d msgs  %.0f msgs/s ", bar, frac*100, done, float64(done)/elapsed.Seconds())
	}
	end = func() {
		if drawn {
			fmt.Fprintln(w)
			drawn = false
		}
	}
	return update, end
}
