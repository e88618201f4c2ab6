package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/cosmix"
	"busbar/moonbridge"
	"busbar/ops"
	"busbar/relay"
	"busbar/transport"
)

func init() {
	addVerb(runServe, []helpPage{
		{path: "serve", summary: "run the broker (data ~/.local/state/busbar, a unix socket, tcp 127.0.0.1:7474)",
			text: `Runs the broker until SIGINT or SIGTERM, then stops gracefully. The first
start creates the data directory (0700), a principal allowed everything
(principals.json) and the matching credentials.json for clients of this OS
user; it prints their paths. Each endpoint it listens on is printed as
"busbar: listening on URL"; logs go to stderr.

Only one broker may use a data directory at a time. A port already in use
is refused: pick another with --tcp 127.0.0.1:0 (a free port, printed) or
turn TCP off with --tcp off.`,
			exit: `0  stopped cleanly after a signal
1  could not start (data directory in use, port in use, bad principals) or the stop was not clean
2  usage: a bad flag or value`,
			example: `$ busbar serve
$ busbar serve --data /tmp/b2 --tcp 127.0.0.1:0 --log-level debug`},
	})
}

// shutdownTimeout bounds the whole graceful stop after a signal.
const shutdownTimeout = 15 * time.Second

func runServe(args []string, stdio IO) int {
	fs := flag.NewFlagSet("busbar serve", flag.ContinueOnError)
	data := new(string)
	fs.Var(dirFlag{data}, "data", "data directory: socket, credentials (env "+envData+"; default ~/.local/state/busbar)")
	unixPath := fs.String("unix", "", `Unix socket path (default <data>/busbar.sock; "off" to disable)`)
	tcpAddr := fs.String("tcp", defaultTCP, `loopback TCP address ("off" to disable)`)
	tlsAddr := fs.String("tls", "", "TLS address (needs --tls-cert and --tls-key)")
	tlsCert := fs.String("tls-cert", "", "TLS certificate file (PEM)")
	tlsKey := fs.String("tls-key", "", "TLS private key file (PEM)")
	httpAddr := fs.String("http", defaultHTTP, `loopback HTTP address: WebSocket at /bus, the browser client at /busbar.js ("off" to disable)`)
	httpsAddr := fs.String("https", "", "HTTPS address, as --http over TLS (needs --tls-cert and --tls-key)")
	httpUnix := fs.String("http-unix", "", `Unix socket for the HTTP endpoint, owner-only (default NAME-http.sock beside the --unix socket NAME.sock; "off" to disable)`)
	truesealAddr := fs.String("trueseal", "", "TCP `ADDR[,ADDR]` of a trueseal relay over the broker's relay store: trueseal clients' push (Noise NK) and receive (Noise XX) sessions, both on each ADDR (docs/trueseal.md; default off)")
	truesealKey := fs.String("trueseal-key", "", "the trueseal relay's static key `FILE` (64 hex digits, owner-only), which must exist: on a bus with --nats-relays, the same file on every broker with --trueseal, so a trueseal client may use any of them (default <data>/trueseal.key, created on first start; docs/trueseal.md#on-a-bus)")
	cosmixAddr := fs.String("cosmix", "", "loopback `ADDR` for cosmix apps: cosmix-noded's client protocol at ws://ADDR/ws, each connection a node of the principal in its ?token=PRINCIPAL:SECRET (docs/cosmix.md; default off)")
	cosmixSock := fs.String("cosmix-socket", "", "Unix socket for cosmix apps' native connect_unix, owner-only (0600; every directory above it the broker user's or root's and writable by nobody else), each connection of the broker's own OS user a node of the principal in <data>/credentials.json (docs/cosmix.md#the-native-unix-socket; Linux, macOS, FreeBSD; default off)")
	wsOrigins := fs.String("ws-origin", "", "comma list of extra browser origins allowed on /bus (host:port patterns; docs/browser.md#origins)")
	principals := fs.String("principals", "", "principals file (default <data>/principals.json, created on first start)")
	name := fs.String("name", broker.DefaultName, "the broker's own node name")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pushRate := fs.Float64("relay-push-rate", 0, "durable pushes a second into one device's inbox (0: the default, 100; negative: no limit)")
	pushBurst := fs.Int("relay-push-burst", 0, "durable pushes one device's inbox takes at once before --relay-push-rate applies (0: the default, 1000)")
	var bus broker.ClusterOptions
	natsURLs := fs.String("nats", "", "join a bus of brokers through these NATS servers (URL[,URL...]; docs/cluster.md); needs --name")
	fs.StringVar(&bus.CredsFile, "nats-creds", "", "NATS credentials file (JWT and nkey seed) the broker presents to NATS")
	fs.StringVar(&bus.TLSCA, "nats-tls-ca", "", "PEM file of the CAs that sign the NATS servers' certificates")
	fs.StringVar(&bus.TLSCert, "nats-tls-cert", "", "client certificate (PEM) for NATS servers that verify clients (with --nats-tls-key)")
	fs.StringVar(&bus.TLSKey, "nats-tls-key", "", "private key (PEM) of --nats-tls-cert")
	fs.StringVar(&bus.SubjectPrefix, "nats-prefix", broker.DefaultClusterSubjectPrefix, "first token of the NATS subjects of this bus (several buses may share NATS)")
	fs.DurationVar(&bus.Heartbeat, "nats-heartbeat", broker.DefaultClusterHeartbeat, "how often the broker tells the bus its nodes when nothing changed")
	fs.DurationVar(&bus.Lease, "nats-lease", broker.DefaultClusterLease, "how long the other brokers keep this broker's nodes without hearing from it (at least 2 heartbeats)")
	fs.IntVar(&bus.LinkWindow, "nats-link-window", broker.DefaultClusterLinkWindow, "bytes each other broker may send this one ahead of what it took in (flow control; docs/cluster.md#flow-control)")
	fs.IntVar(&bus.LinkPendingBytes, "nats-link-pending", broker.DefaultClusterLinkPendingBytes, "bytes of the other brokers' traffic the NATS client keeps for this broker; past it NATS drops (counted: link_lost)")
	busKeyFile := fs.String("nats-bus-key", "", "file of the key the brokers of this bus share, and nobody else (32 bytes or more, owner-only): every message between brokers is authenticated and stamped, so NATS access alone forges nothing (docs/cluster.md#bus-key)")
	fs.BoolVar(&bus.SealPayloads, "nats-bus-seal", false, "encrypt every message between brokers with --nats-bus-key too, so NATS access alone reads nothing")
	natsRelays := fs.String("nats-relays", "", "the brokers of the bus that keep the durable relay's inboxes (name[,name...]), the same list on every broker")
	var limits broker.Options
	fs.IntVar(&limits.MaxPayload, "max-payload", broker.DefaultMaxPayload, "bytes of body in one message; past it the message is refused")
	fs.IntVar(&limits.MaxQueueBytes, "max-queue-bytes", broker.DefaultMaxQueueBytes, "outbound bytes queued per connection (at least --max-payload)")
	fs.IntVar(&limits.MaxQueueMessages, "max-queue-messages", broker.DefaultMaxQueueMessages, "outbound messages queued per connection")
	fs.IntVar(&limits.MaxConnections, "max-connections", broker.DefaultMaxConnections, "connections served at once, logging-in ones included")
	fs.IntVar(&limits.MaxNodesPerPrincipal, "max-nodes-per-principal", broker.DefaultMaxNodesPerPrincipal, "nodes one principal may have logged in at once (a principal allowed every channel is not capped)")
	mbAddr := fs.String("moonbridge", "", "TCP address for MoonBridge backends: their Java client (backend-channel-client) connects here unchanged (docs/moonbridge.md; off unless given)")
	mbProxy := fs.String("moonbridge-proxy", "", "the node a MoonBridge backend reaches as Endpoint.proxy() (default: the broker's own name)")
	mbHosts := fs.String("moonbridge-allow-hosts", "", "comma list of the hosts a MoonBridge backend may advertise in its game address (default: any)")
	configPath := fs.String(flagConfig, "", "TOML file of serve's flags (key = flag name; docs/operations.md#configuration)")
	printCfg := fs.Bool(flagPrintConfig, false, "print the effective configuration (flags > file > environment > defaults) and exit")
	if !parseNoArgs(stdio, "serve", fs, args) {
		return exitUsage
	}
	if err := applyConfig(fs, *configPath, os.LookupEnv); err != nil {
		return usageError(stdio, "serve", "%v", err)
	}
	if err := checkLimits(fs); err != nil {
		return usageError(stdio, "serve", "%v", err)
	}
	if *printCfg {
		printConfig(stdio.Stdout, fs, map[string]string{"data": cmp.Or(*data, defaultDataDir())})
		return exitOK
	}
	if *natsRelays != "" {
		bus.Relays = strings.Split(*natsRelays, ",")
	}
	if *natsURLs != "" {
		bus.URLs = strings.Split(*natsURLs, ",")
		if *name == broker.DefaultName {
			fmt.Fprintln(stdio.Stderr, "busbar serve: --nats needs --name: every broker on a bus has a name of its own")
			return exitUsage
		}
		if *busKeyFile != "" {
			key, err := broker.ReadBusKey(*busKeyFile)
			if err != nil {
				fmt.Fprintln(stdio.Stderr, "busbar serve: --nats-bus-key:", err)
				return exitUsage
			}
			bus.BusKey = key
		}
		if w := natsExposure(bus.URLs, bus.CredsFile, bus.TLSCA, bus.BusKey != nil, bus.SealPayloads); w != "" {
			fmt.Fprintln(stdio.Stderr, "busbar serve: WARNING:", w)
		}
	}
	if err := truesealOnBus(*truesealAddr, *truesealKey, bus.Relays); err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitUsage
	}
	if bus.SealPayloads && bus.BusKey == nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve: --nats-bus-seal needs --nats-bus-key")
		return exitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve: --log-level:", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: lvl}))
	dir := cmp.Or(*data, defaultDataDir())

	// With --principals the operator keeps principals elsewhere (say, one
	// file shared by the brokers of a bus): nothing is bootstrapped, so no
	// credentials file appears that the broker would not accept.
	principalsPath := *principals
	if principalsPath == "" {
		boot, err := auth.Bootstrap(dir)
		if err != nil {
			log.Error("cannot prepare the data directory", "err", err)
			return exitFail
		}
		if boot.Created {
			fmt.Fprintf(stdio.Stdout, "busbar: created credentials on first start:\n  principals (broker): %s\n  credentials (clients of this OS user): %s\n", boot.PrincipalsPath, boot.CredentialsPath)
		}
		principalsPath = boot.PrincipalsPath
	} else if err := auth.PrepareDataDir(dir); err != nil {
		log.Error("cannot prepare the data directory", "err", err)
		return exitFail
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitFail
	}
	defer unlock()
	store, err := auth.Load(principalsPath)
	if err != nil {
		log.Error("cannot load principals", "err", err)
		return exitFail
	}
	for _, note := range store.Notes() { // entries older than the state permissions
		log.Warn("principal given default state permissions", "file", principalsPath, "detail", note)
	}
	opts := limits
	opts.Name, opts.Auth, opts.Logger, opts.StatePath, opts.Cluster = *name, store, log, filepath.Join(dir, "state.db"), bus
	opts.RelayDir, opts.Relay = filepath.Join(dir, "relay"), relay.Options{MaxPushRate: *pushRate, PushBurst: *pushBurst}
	b, err := broker.New(opts)
	if err != nil {
		// As it is, not as a log attribute: it names the file, what is
		// wrong and what to do (a state store the broker cannot trust).
		fmt.Fprintln(stdio.Stderr, "busbar serve: cannot start the broker:", err)
		return exitFail
	}
	eps, err := endpoints(dir, *unixPath, *tcpAddr, *tlsAddr, *tlsCert, *tlsKey)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		_ = b.Shutdown(context.Background())
		return exitUsage
	}
	cx, err := listenCosmix(*cosmixAddr, *cosmixSock, dir, b, log)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		_ = b.Shutdown(context.Background())
		if errors.Is(err, cosmix.ErrNotLoopback) || errors.Is(err, cosmix.ErrUnsafeSocketPath) || errors.Is(err, cosmix.ErrUnixUnsupported) {
			return exitUsage
		}
		return exitFail
	}
	defer cx.close()
	ts, err := listenTrueseal(*truesealAddr, dir, *truesealKey, bus.Relays, b)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		cx.close()
		_ = b.Shutdown(context.Background())
		return exitFail
	}
	defer ts.close()
	token, _, err := ops.LoadToken(dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve: the HTTP token:", err)
		_ = b.Shutdown(context.Background())
		return exitFail
	}
	httpSock, note := httpSocketPath(*httpUnix, *unixPath, dir)
	if note != "" {
		log.Warn(note)
	}
	hls, err := serveHTTPFlags(*httpAddr, *httpsAddr, httpSock, *tlsCert, *tlsKey, *wsOrigins, ops.Options{Broker: b, Token: token, DataDir: dir, Version: readBuildInfo().Version, Collectors: ts.collectors(),
		ReloadPrincipals: func() (string, error) { return principalsPath, reloadPrincipals(store, principalsPath, log, "http") }})
	if err != nil {
		if transport.IsNoUnixSockets(err) {
			err = noUnixSockets("unix://" + httpSock)
		}
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		_ = b.Shutdown(context.Background())
		if errors.Is(err, errHTTPSNeedsCert) {
			return exitUsage
		}
		return exitFail
	}
	mb, mbLn, err := startMoonBridge(*mbAddr, *mbProxy, *mbHosts, b, store, log)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		closeHTTP(context.Background(), hls)
		_ = b.Shutdown(context.Background())
		return exitFail
	}
	var lns []net.Listener
	for _, ep := range eps {
		ln, err := transport.Listen(ep.Endpoint, ep.tls)
		if err != nil {
			fmt.Fprintln(stdio.Stderr, "busbar serve:", listenError(ep.Endpoint, err))
			for _, l := range lns {
				_ = l.Close()
			}
			if mb != nil {
				_ = mbLn.Close()
				_ = mb.Close()
			}
			closeHTTP(context.Background(), hls)
			_ = b.Shutdown(context.Background())
			return exitFail
		}
		lns = append(lns, ln)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	// Registered before the listeners are announced: a SIGHUP from then
	// on reloads, never kills.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	wg.Go(func() { reloadOnHangup(ctx, hup, store, principalsPath, log) })
	// Before the stream listeners: a script that waits for the tcp line
	// has the ws line too.
	for _, h := range hls {
		h.announce(stdio.Stdout, token)
		wg.Go(func() { _ = b.Serve(h.bus) }) // ends at Shutdown
		wg.Go(func() {
			if err := h.serve(); err != nil {
				log.Error("HTTP listener failed", "url", h.url, "err", err)
				stop()
			}
		})
	}
	if mb != nil {
		fmt.Fprintf(stdio.Stdout, "busbar: moonbridge backends on %s (proxy node %s)\n", mbLn.Addr(), cmp.Or(*mbProxy, b.Name()))
		wg.Go(func() {
			if err := mb.Serve(mbLn); err != nil && !errors.Is(err, moonbridge.ErrServerClosed) {
				log.Error("moonbridge listener failed", "address", mbLn.Addr().String(), "err", err)
				stop()
			}
		})
	}
	for i, ln := range lns {
		ep := eps[i].Endpoint
		if ep.Scheme != transport.SchemeUnix {
			ep.Address = ln.Addr().String() // the real port when :0 was asked
		}
		fmt.Fprintf(stdio.Stdout, "busbar: listening on %s\n", ep)
		wg.Go(func() {
			if err := b.Serve(ln); err != nil && !errors.Is(err, broker.ErrClosed) {
				log.Error("listener failed", "endpoint", ep, "err", err)
				stop()
			}
		})
	}
	cx.serve(&wg, stdio.Stdout, log, stop)
	ts.serve(&wg, stdio.Stdout, log, stop)
	log.Info("broker ready", "name", b.Name(), "data", dir)
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	cx.close()
	if mb != nil {
		_ = mb.Close() // GOODBYE to the backends, before their nodes go
	}
	ts.close() // before the broker closes the relay store
	err = b.Shutdown(sctx)
	closeHTTP(sctx, hls)
	wg.Wait()
	if err != nil {
		log.Error("shutdown was not clean", "err", err)
		return exitFail
	}
	log.Info("stopped")
	return exitOK
}

// startMoonBridge makes the MoonBridge listener of --moonbridge ADDR, or
// nothing when addr is empty.
func startMoonBridge(addr, proxy, hosts string, b *broker.Broker, store *auth.Store, log *slog.Logger) (*moonbridge.Server, net.Listener, error) {
	if addr == "" || addr == "off" {
		return nil, nil, nil
	}
	cfg := moonbridge.Config{Keys: store, Dial: b.DialInProcessAs, ProxyNode: cmp.Or(proxy, b.Name()), Logger: log}
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.AllowHosts = append(cfg.AllowHosts, h)
		}
	}
	srv, err := moonbridge.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--moonbridge-proxy: %w", err)
	}
	ln, err := net.Listen("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		return nil, nil, fmt.Errorf("--moonbridge %s: %w", addr, err)
	}
	return srv, ln, nil
}

// serveLimits are the serve flags that set a broker limit; each takes a
// positive number.
var serveLimits = []string{"max-payload", "max-queue-bytes", "max-queue-messages", "max-connections", "max-nodes-per-principal"}

// checkLimits refuses a limit flag of 0 or less: a limit that is off is
// not a limit, and 0 would silently mean the default.
func checkLimits(fs *flag.FlagSet) error {
	for _, name := range serveLimits {
		if n := fs.Lookup(name).Value.(flag.Getter).Get().(int); n <= 0 {
			return fmt.Errorf("--%s %d: want a positive number", name, n)
		}
	}
	return nil
}

// reloadOnHangup reloads the principals file on each hup until ctx
// ends. A file that does not load leaves the principals in force.
// Connections keep the permissions they logged in with; the reloaded file
// applies to the connections that log in after it.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, store *auth.Store, path string, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = reloadPrincipals(store, path, log, "SIGHUP")
		}
	}
}

// reloadPrincipals reloads path into store and logs the outcome; on
// error the previous principals stay in force. why is what asked
// (SIGHUP, or busbar principal over the HTTP API).
func reloadPrincipals(store *auth.Store, path string, log *slog.Logger, why string) error {
	if err := store.Reload(path); err != nil {
		log.Error("principals not reloaded; the previous ones stay in force", "file", path, "by", why, "err", err)
		return err
	}
	for _, note := range store.Notes() {
		log.Warn("principal given default state permissions", "file", path, "detail", note)
	}
	log.Info("principals reloaded", "file", path, "by", why)
	return nil
}

type listenSpec struct {
	transport.Endpoint
	tls *tls.Config
}

func endpoints(dir, unixPath, tcpAddr, tlsAddr, cert, key string) ([]listenSpec, error) {
	var out []listenSpec
	if unixPath != "off" {
		out = append(out, listenSpec{Endpoint: transport.Endpoint{Scheme: transport.SchemeUnix, Address: cmp.Or(unixPath, filepath.Join(dir, socketName))}})
	}
	if tcpAddr != "off" && tcpAddr != "" {
		ep, err := transport.ParseEndpoint("tcp://" + strings.TrimPrefix(tcpAddr, "tcp://"))
		if err != nil {
			return nil, fmt.Errorf("--tcp: %w", err)
		}
		out = append(out, listenSpec{Endpoint: ep})
	}
	if tlsAddr != "" {
		if cert == "" || key == "" {
			return nil, errors.New("--tls needs --tls-cert and --tls-key")
		}
		ep, err := transport.ParseEndpoint("tls://" + strings.TrimPrefix(tlsAddr, "tls://"))
		if err != nil {
			return nil, fmt.Errorf("--tls: %w", err)
		}
		cfg, err := transport.LoadTLS(cert, key)
		if err != nil {
			return nil, err
		}
		out = append(out, listenSpec{Endpoint: ep, tls: cfg})
	}
	if len(out) == 0 {
		return nil, errors.New("nothing to listen on")
	}
	return out, nil
}

// noUnixSockets says what to run instead where the system has no Unix
// sockets: serve does not fall back to TCP alone by itself, since the
// clients' default is the socket.
func noUnixSockets(endpoint string) error {
	return fmt.Errorf("cannot listen on %s: this system has no Unix sockets (Windows before 10 version 1803): start with --unix off --http-unix off, and give clients --server tcp://%s (docs/portability.md)", endpoint, defaultTCP)
}

// listenError says what to do about an endpoint serve cannot listen on:
// for a port in use, the flags that choose another or turn it off.
func listenError(ep transport.Endpoint, err error) error {
	if ep.Scheme == transport.SchemeUnix && transport.IsNoUnixSockets(err) {
		return noUnixSockets(ep.String())
	}
	if !errors.Is(err, transport.ErrAddressInUse) {
		return fmt.Errorf("cannot listen on %s: %w", ep, err)
	}
	flag := "--" + ep.Scheme
	switch ep.Scheme {
	case transport.SchemeUnix:
		return fmt.Errorf("%s is in use (another broker?): choose another path with --unix PATH, or --unix off", ep)
	case transport.SchemeTLS:
		return fmt.Errorf("%s is in use (another broker?): choose another with --tls ADDR (127.0.0.1:0: a free port, printed)", ep)
	}
	return fmt.Errorf("%s is in use (another broker?): choose another with %s 127.0.0.1:0 (a free port, printed) or turn it off with %s off", ep, flag, flag)
}
