package main

// Workloads 9 to 11: the same traffic as 1, 3 and 4, across a bus of
// brokers (docs/cluster.md). Each round starts a NATS cluster of three
// nats-server processes, routed to each other, and two `busbar serve
// --nats` processes, b1 on the cluster's first server and b2 on its
// second. busbar's publisher or requester connects to b1 and its
// subscriber or responder to b2, over TCP or each broker's Unix socket;
// NATS's are nats.go clients on the same two servers of the same cluster.
// So both sides cross the same NATS route, and busbar pays for its two
// brokers on top: the target is at most 1.5 × NATS's latency and
// at least 0.7 × its throughput.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"busbar/client"
	"busbar/internal/cli"
	"busbar/wire"
)

const (
	roleNATSNode  = "nats-node"  // one server of the NATS cluster
	roleBusBroker = "busbar-bus" // `busbar serve --nats`
	// envRoutes is a NATS cluster server's seed route; envNATS the NATS
	// URL a bus broker joins through.
	envRoutes = "BUSBAR_BENCH_ROUTES"
	envNATS   = "BUSBAR_BENCH_NATS"
	// busNATSNodes is the NATS cluster's size, as issue 13 asks.
	busNATSNodes = 3
	// busSettle bounds the wait for the cluster's routes, and for a far
	// node's registration to reach the near broker (or a far subscription
	// the near NATS server).
	busSettle = 20 * time.Second
)

// busWorkloads run on the bus; every other workload on single servers.
var busWorkloads = []string{"9", "10", "11"}

const busNote = "9-11: busbar is two `busbar serve --nats` brokers on a 3-server NATS cluster, the sender on one, the receiver on the other; NATS is nats.go clients on the same two servers of that cluster"

// serveNATSNode runs one server of the NATS cluster; its READY line names
// its client URL and its route URL.
func serveNATSNode(ctx context.Context) error {
	opts := &server.Options{ServerName: os.Getenv(envName), Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Username: natsUser, Password: natsPass, MaxPayload: 1 << 20,
		Cluster: server.ClusterOpts{Name: "busbar-bench", Host: "127.0.0.1", Port: -1}}
	if seed := os.Getenv(envRoutes); seed != "" {
		opts.Routes = server.RoutesFromStr(seed)
	}
	return serveNATS(ctx, opts)
}

// serveBusBroker runs `busbar serve --nats` (the CLI's own code, as
// cmd/busbar calls it) on TCP and its Unix socket, and prints READY with
// both once it listens. Stdin closing (the harness gone) is a SIGTERM.
func serveBusBroker(dir string) error {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	pr, pw := io.Pipe()
	go func() {
		var tcp, unix string
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			addr, ok := strings.CutPrefix(sc.Text(), "busbar: listening on ")
			switch {
			case !ok:
			case strings.HasPrefix(addr, "tcp://"):
				tcp = addr
			default:
				unix = addr
			}
			if ok && tcp != "" && unix != "" {
				fmt.Printf("READY %s %s\n", tcp, unix)
			}
		}
	}()
	code := cli.Main([]string{"serve", "--data", dir, "--name", os.Getenv(envName), "--tcp", "127.0.0.1:0", "--http", "off",
		"--nats", os.Getenv(envNATS), "--log-level", "warn"}, cli.IO{Stdin: os.Stdin, Stdout: pw, Stderr: os.Stderr})
	_ = pw.Close()
	if code != 0 {
		return fmt.Errorf("busbar serve exited with %d", code)
	}
	return nil
}

// metricCPUBrokers is the brokers' CPU row of workloads 9 to 11, which
// has no ratio: NATS's side has no brokers.
const metricCPUBrokers = "CPU, brokers"

// busProcs are the processes that carry a bus round's traffic, in the
// parts its CPU is reported by.
type busProcs struct {
	harness int   // this process: the clients of every system
	nats    []int // the NATS cluster's servers
	brokers []int // b1 and b2 (idle while NATS's own clients run)
}

func (p busProcs) all() []int {
	return append(append([]int{p.harness}, p.nats...), p.brokers...)
}

// startBus starts the NATS cluster and the two brokers, and returns the
// systems of workloads 9 to 11 and the processes that carry their
// traffic.
func startBus(straggle time.Duration) (systems []system, procs busProcs, stop func(), err error) {
	if straggle <= 0 {
		straggle = idleWait
	}
	var kids []*child
	stopAll := func() { // the brokers first, so they leave the bus in order
		for i := len(kids) - 1; i >= 0; i-- {
			kids[i].stop()
		}
	}
	stop = stopAll
	defer func() {
		if err != nil {
			stopAll() // the error returns set stop to nil
		}
	}()
	var urls []string
	seed := ""
	for i := range busNATSNodes {
		env := []string{fmt.Sprintf("%s=nats-%d", envName, i+1)}
		if seed != "" {
			env = append(env, envRoutes+"="+seed)
		}
		k, err := startChild(roleNATSNode, env...)
		if err != nil {
			return nil, procs, nil, err
		}
		kids = append(kids, k)
		urls = append(urls, k.addrs[0])
		if seed == "" {
			seed = k.addrs[1]
		}
	}
	if err := awaitRoutes(urls); err != nil {
		return nil, procs, nil, err
	}
	var brokers []*child
	for i, name := range []string{"b1", "b2"} {
		url := strings.Replace(urls[i], "nats://", "nats://"+natsUser+":"+natsPass+"@", 1)
		k, err := startChild(roleBusBroker, envName+"="+name, envNATS+"="+url)
		if err != nil {
			return nil, procs, nil, err
		}
		kids = append(kids, k)
		brokers = append(brokers, k)
	}
	c1, err := brokers[0].credential()
	if err != nil {
		return nil, procs, nil, err
	}
	c2, err := brokers[1].credential()
	if err != nil {
		return nil, procs, nil, err
	}
	procs.harness = os.Getpid()
	for i, k := range kids {
		if i < busNATSNodes {
			procs.nats = append(procs.nats, k.cmd.Process.Pid)
		} else {
			procs.brokers = append(procs.brokers, k.cmd.Process.Pid)
		}
	}
	return []system{
		&busbarSystem{label: "busbar-tcp", endpoint: brokers[0].addrs[0], cred: c1, far: brokers[1].addrs[0], farCred: c2, srv: brokers[0], straggle: straggle},
		&busbarSystem{label: "busbar-unix", endpoint: brokers[0].addrs[1], cred: c1, far: brokers[1].addrs[1], farCred: c2, srv: brokers[0], straggle: straggle},
		&natsSystem{url: urls[0], far: urls[1], srv: kids[0], straggle: straggle},
	}, procs, stop, nil
}

// awaitRoutes waits until a message published on each server reaches a
// subscriber on every other: the routes carry interest both ways.
func awaitRoutes(urls []string) error {
	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, u := range urls {
		c, err := nats.Connect(u, nats.UserInfo(natsUser, natsPass), nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	for i, sub := range conns {
		for j, pub := range conns {
			if i != j {
				if err := awaitInterest(pub, sub, fmt.Sprintf("bench.routed.%d", i)); err != nil {
					return fmt.Errorf("NATS server %d never reached server %d: %w", j+1, i+1, err)
				}
			}
		}
	}
	return nil
}

// awaitInterest waits until a message pub publishes on subject reaches a
// subscription sub makes now. NATS tells a route a connection's
// subscriptions in order, so the ones sub made before are known there too.
func awaitInterest(pub, sub *nats.Conn, subject string) error {
	s, err := sub.SubscribeSync(subject)
	if err != nil {
		return err
	}
	defer func() { _ = s.Unsubscribe() }()
	if err := sub.Flush(); err != nil {
		return err
	}
	for deadline := time.Now().Add(busSettle); time.Now().Before(deadline); {
		if err := pub.Publish(subject, nil); err != nil {
			return err
		}
		if _, err := s.NextMsg(20 * time.Millisecond); err == nil {
			return nil
		}
	}
	return errors.New("no interest across the route")
}

// awaitFar waits until the NATS server of pub knows the subscriptions of
// every far connection (none to wait for on one server).
func (s *natsSystem) awaitFar(pub *nats.Conn, far []*nats.Conn) error {
	if s.far == "" {
		return nil
	}
	for _, c := range far {
		if err := awaitInterest(pub, c, "bench.probe"); err != nil {
			return err
		}
	}
	return nil
}

// awaitFar waits until near's broker lists every far client's node as
// ready (its subscription or handler known): a bus's directory reaches
// the other brokers within a snapshot gap and a NATS hop (none to wait
// for on one broker).
func (s *busbarSystem) awaitFar(ctx context.Context, near *client.Client, far []*client.Client, ready func(wire.NodeInfo) bool) error {
	if s.far == "" {
		return nil
	}
	want := map[string]bool{}
	for _, c := range far {
		want[c.Node()] = true
	}
	for deadline := time.Now().Add(busSettle); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		nodes, err := near.Directory(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, info := range nodes {
			if want[info.Node] && ready(info) {
				n++
			}
		}
		if n == len(want) {
			return nil
		}
	}
	return fmt.Errorf("%s: the far nodes never reached the near broker's directory", s.label)
}

// runBusRound runs workloads 9 to 11 of one round on a fresh bus. Each
// workload also records the CPU time every process spent on it, the
// harness's clients included, per message sent: on two shared cores,
// throughput follows it. It is also recorded by part (the clients, the
// NATS servers, the brokers), to say what the brokers' hop costs.
func runBusRound(ctx context.Context, p plan, rep *report, round int, log io.Writer) error {
	systems, procs, stop, err := startBus(p.straggle)
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	defer stop()
	rep.note(busNote)
	order := systems
	if round%2 == 1 {
		order = []system{systems[2], systems[1], systems[0]}
	}
	for _, s := range order {
		fmt.Fprintf(log, "round %d: %s on a bus\n", round+1, s.name())
		for _, w := range []struct {
			n, name string
			msgs    int64
			run     func(context.Context, *report, system, string, int64) error
		}{
			{"9", "9 bus req/reply sync 128B", p.reqMsgs, measureRequestLatency},
			{"10", "10 bus req/reply x16 128B", p.req16Msgs, measureRequestThroughput},
			{"11", "11 bus pubsub 1->1 128B", p.pubsubMsgs, measurePubsub},
		} {
			if !p.runs(w.n) {
				continue
			}
			parts := []struct {
				metric string
				pids   []int
				before time.Duration
			}{
				{"CPU, all processes", procs.all(), 0},
				{"CPU, clients (harness)", []int{procs.harness}, 0},
				{"CPU, NATS servers", procs.nats, 0},
				{metricCPUBrokers, procs.brokers, 0},
			}
			for i := range parts {
				parts[i].before = cpuTime(parts[i].pids)
			}
			if err := w.run(ctx, rep, s, w.name, w.msgs); err != nil {
				return fmt.Errorf("%s on a bus: %w", s.name(), err)
			}
			for _, pt := range parts {
				spent := cpuTime(pt.pids) - pt.before
				rep.record(w.name, pt.metric, "µs/msg", "lower", s.name(), float64(spent.Microseconds())/float64(w.msgs))
			}
		}
		runtime.GC()
	}
	return nil
}

// cpuTime is the user and system CPU time the processes pids have used,
// from /proc (in clock ticks of 10 ms: a figure is meaningful for runs of
// seconds, not for the quick test's).
func cpuTime(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Past the command name in parentheses: state is field 3, utime 14, stime 15.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+st) * clockTick
	}
	return total
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond
