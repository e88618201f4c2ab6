package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"busbar/auth"
	"busbar/broker"
	"busbar/relay"
	"busbar/transport"
)

// Credentials both servers require, so both pay for authentication.
const (
	natsUser = "bench"
	natsPass = "bench-secret"
)

// The parent tells a re-executed child its role through the environment,
// so the same binary (or test binary) can serve.
const (
	envRole = "BUSBAR_BENCH_ROLE"
	envDir  = "BUSBAR_BENCH_DIR"
	// envName names a child of a role that runs several times at once (a
	// NATS cluster's server, a broker of a bus: cluster.go).
	envName = "BUSBAR_BENCH_NAME"
)

// envProfile, when set in the harness's environment, makes each server
// child write a CPU profile to $BUSBAR_BENCH_CPUPROFILE.<role>[.<name>].
const envProfile = "BUSBAR_BENCH_CPUPROFILE"

// serveChild runs the server role and exits.
func serveChild(role string) {
	if path := os.Getenv(envProfile); path != "" {
		if name := os.Getenv(envName); name != "" {
			path += "." + name
		}
		f, err := os.Create(path + "." + role)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if err := serveRole(role, os.Getenv(envDir)); err != nil {
		fmt.Fprintln(os.Stderr, "bench server:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// serveRole runs this process as a server child: it prints "READY <addr>
// [<addr2>]" on stdout and serves until stdin closes or a signal arrives.
func serveRole(role, dir string) error {
	if role == roleBusBroker { // busbar serve, which handles its own signals
		return serveBusBroker(dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }() // parent gone: exit
	switch role {
	case "nats":
		return serveNATS(ctx, &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Username: natsUser, Password: natsPass,
			MaxPayload: 1 << 20})
	case "jetstream":
		return serveJetStream(ctx, dir)
	case roleNATSNode:
		return serveNATSNode(ctx)
	case "busbar":
		boot, err := auth.Bootstrap(dir)
		if err != nil {
			return err
		}
		store, err := auth.Load(boot.PrincipalsPath)
		if err != nil {
			return err
		}
		// A relay, as `busbar serve` embeds it: <data>/relay, with the
		// per-inbox push rate off (`busbar serve --relay-push-rate -1`):
		// workload 8 pushes tens of thousands a second into one inbox, and
		// measures the path, not the rate limit. Registrations per
		// connection are raised from 1,024 to hold workload 13's 10,000
		// subscriptions on one connection (nats-server has no such limit
		// by default). Every other limit is the default.
		b, err := broker.New(broker.Options{Auth: store, RelayDir: filepath.Join(dir, "relay"),
			Relay: relay.Options{MaxPushRate: -1}, MaxRegistrations: manySubs + fewSubs})
		if err != nil {
			return err
		}
		var addrs []string
		for _, ep := range []transport.Endpoint{
			{Scheme: transport.SchemeTCP, Address: "127.0.0.1:0"},
			{Scheme: transport.SchemeUnix, Address: filepath.Join(dir, "busbar.sock")},
		} {
			ln, err := transport.Listen(ep, nil)
			if err != nil {
				return err
			}
			if ep.Scheme == transport.SchemeTCP {
				ep.Address = ln.Addr().String()
			}
			addrs = append(addrs, ep.String())
			go func() { _ = b.Serve(ln) }()
		}
		fmt.Printf("READY %s\n", strings.Join(addrs, " "))
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return b.Shutdown(sctx)
	}
	return fmt.Errorf("unknown role %q", role)
}

// child is a server child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.Closer
	addrs []string
	dir   string
}

// startChild re-executes this binary in a server role; env are more
// KEY=value settings for it.
func startChild(role string, env ...string) (*child, error) {
	dir, err := os.MkdirTemp("", "busbar-bench-")
	if err != nil {
		return nil, err
	}
	dir = filepath.Join(dir, "data") // Bootstrap wants a private (0700) directory it creates
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), envRole+"="+role, envDir+"="+dir), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: in, dir: dir}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "READY ") {
		c.stop()
		return nil, fmt.Errorf("%s server did not start: %q %v", role, line, err)
	}
	c.addrs = strings.Fields(strings.TrimPrefix(line, "READY "))
	return c, nil
}

func (c *child) stop() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(filepath.Dir(c.dir))
}

// memory reads the child's resident set size and its peak, in bytes.
func (c *child) memory() (rss, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// credential is the busbar child's generated client credential.
func (c *child) credential() (auth.Credential, error) {
	return auth.LoadCredential(filepath.Join(c.dir, auth.CredentialsFile))
}

// jetStreamConfig is the JetStream child's configuration: an fsync on
// every write, file storage under the child's directory.
const jetStreamConfig = `listen: "127.0.0.1:-1"
max_payload: 1MB
authorization { user: %q, password: %q }
jetstream { store_dir: %q, sync_interval: always }
`

// serveJetStream runs a nats-server with JetStream from a config file.
func serveJetStream(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	conf := filepath.Join(dir, "jetstream.conf")
	text := fmt.Sprintf(jetStreamConfig, natsUser, natsPass, filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return err
	}
	if !opts.JetStream || !opts.SyncAlways {
		return errors.New("jetstream config: JetStream with sync_interval always expected")
	}
	opts.NoLog, opts.NoSigs = true, true
	return serveNATS(ctx, opts)
}

// serveNATS runs a nats-server until ctx ends; its READY line names its
// client URL, then its route URL when it is in a cluster.
func serveNATS(ctx context.Context, opts *server.Options) error {
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		return errors.New("nats-server not ready")
	}
	if r := s.ClusterAddr(); r != nil {
		fmt.Printf("READY nats://%s nats://%s\n", s.Addr(), r)
	} else {
		fmt.Printf("READY nats://%s\n", s.Addr())
	}
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
