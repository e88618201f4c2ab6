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
	"busbar/edge/cosmix"
	"busbar/edge/moonbridge"
	"busbar/ops"
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

// serveOptions are serve's flags (registered by serveFlags), checked by
// parseServe.
type serveOptions struct {
	data, unixPath, tcpAddr, tlsAddr, tlsCert, tlsKey string
	httpAddr, httpsAddr, httpUnix, wsOrigins          string
	truesealAddr, truesealKey                         string
	cosmixAddr, cosmixSock                            string
	principals, logLevel                              string
	// broker: the name, limits, relay and cluster flags; parseServe adds
	// the cluster's URLs, relays and bus key from the strings below.
	broker                           broker.Options
	natsURLs, busKeyFile, natsRelays string
	mbAddr, mbProxy, mbHosts         string
	configPath                       string
	printCfg                         bool
	level                            slog.Level // of logLevel
}

// serveFlags registers serve's flags into o.
func serveFlags(o *serveOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("busbar serve", flag.ContinueOnError)
	fs.Var(dirFlag{&o.data}, "data", "data directory: socket, credentials (env "+envData+"; default ~/.local/state/busbar)")
	fs.StringVar(&o.unixPath, "unix", "", `Unix socket path (default <data>/busbar.sock; "off" to disable)`)
	fs.StringVar(&o.tcpAddr, "tcp", defaultTCP, `loopback TCP address ("off" to disable)`)
	fs.StringVar(&o.tlsAddr, "tls", "", "TLS address (needs --tls-cert and --tls-key)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (PEM)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fs.StringVar(&o.httpAddr, "http", defaultHTTP, `loopback HTTP address: WebSocket at /bus, the browser client at /busbar.js ("off" to disable)`)
	fs.StringVar(&o.httpsAddr, "https", "", "HTTPS address, as --http over TLS (needs --tls-cert and --tls-key)")
	fs.StringVar(&o.httpUnix, "http-unix", "", `Unix socket for the HTTP endpoint, owner-only (default NAME-http.sock beside the --unix socket NAME.sock; "off" to disable)`)
	fs.StringVar(&o.truesealAddr, "trueseal", "", "TCP `ADDR[,ADDR]` of a trueseal relay over the broker's relay store: trueseal clients' push (Noise NK) and receive (Noise XX) sessions, both on each ADDR (docs/trueseal.md; default off)")
	fs.StringVar(&o.truesealKey, "trueseal-key", "", "the trueseal relay's static key `FILE` (64 hex digits, owner-only), which must exist: on a bus with --nats-relays, the same file on every broker with --trueseal, so a trueseal client may use any of them (default <data>/trueseal.key, created on first start; docs/trueseal.md#on-a-bus)")
	fs.StringVar(&o.cosmixAddr, "cosmix", "", "loopback `ADDR` for cosmix apps: cosmix-noded's client protocol at ws://ADDR/ws, each connection a node of the principal in its ?token=PRINCIPAL:SECRET (docs/cosmix.md; default off)")
	fs.StringVar(&o.cosmixSock, "cosmix-socket", "", "Unix socket for cosmix apps' native connect_unix, owner-only (0600; every directory above it the broker user's or root's and writable by nobody else), each connection of the broker's own OS user a node of the principal in <data>/credentials.json (docs/cosmix.md#the-native-unix-socket; Linux, macOS, FreeBSD; default off)")
	fs.StringVar(&o.wsOrigins, "ws-origin", "", "comma list of extra browser origins allowed on /bus (host:port patterns; docs/browser.md#origins)")
	fs.StringVar(&o.principals, "principals", "", "principals file (default <data>/principals.json, created on first start)")
	fs.StringVar(&o.broker.Name, "name", broker.DefaultName, "the broker's own node name")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Float64Var(&o.broker.Relay.MaxPushRate, "relay-push-rate", 0, "durable pushes a second into one device's inbox (0: the default, 100; negative: no limit)")
	fs.IntVar(&o.broker.Relay.PushBurst, "relay-push-burst", 0, "durable pushes one device's inbox takes at once before --relay-push-rate applies (0: the default, 1000)")
	bus := &o.broker.Cluster
	fs.StringVar(&o.natsURLs, "nats", "", "join a bus of brokers through these NATS servers (URL[,URL...]; docs/cluster.md); needs --name")
	fs.StringVar(&bus.CredsFile, "nats-creds", "", "NATS credentials file (JWT and nkey seed) the broker presents to NATS")
	fs.StringVar(&bus.TLSCA, "nats-tls-ca", "", "PEM file of the CAs that sign the NATS servers' certificates")
	fs.StringVar(&bus.TLSCert, "nats-tls-cert", "", "client certificate (PEM) for NATS servers that verify clients (with --nats-tls-key)")
	fs.StringVar(&bus.TLSKey, "nats-tls-key", "", "private key (PEM) of --nats-tls-cert")
	fs.StringVar(&bus.SubjectPrefix, "nats-prefix", broker.DefaultClusterSubjectPrefix, "first token of the NATS subjects of this bus (several buses may share NATS)")
	fs.DurationVar(&bus.Heartbeat, "nats-heartbeat", broker.DefaultClusterHeartbeat, "how often the broker tells the bus its nodes when nothing changed")
	fs.DurationVar(&bus.Lease, "nats-lease", broker.DefaultClusterLease, "how long the other brokers keep this broker's nodes without hearing from it (at least 2 heartbeats)")
	fs.IntVar(&bus.LinkWindow, "nats-link-window", broker.DefaultClusterLinkWindow, "bytes each other broker may send this one ahead of what it took in (flow control; docs/cluster.md#flow-control)")
	fs.IntVar(&bus.LinkPendingBytes, "nats-link-pending", broker.DefaultClusterLinkPendingBytes, "bytes of the other brokers' traffic the NATS client keeps for this broker; past it NATS drops (counted: link_lost)")
	fs.StringVar(&o.busKeyFile, "nats-bus-key", "", "file of the key the brokers of this bus share, and nobody else (32 bytes or more, owner-only): every message between brokers is authenticated and stamped, so NATS access alone forges nothing (docs/cluster.md#bus-key)")
	fs.BoolVar(&bus.SealPayloads, "nats-bus-seal", false, "encrypt every message between brokers with --nats-bus-key too, so NATS access alone reads nothing")
	fs.StringVar(&o.natsRelays, "nats-relays", "", "the brokers of the bus that keep the durable relay's inboxes (name[,name...]), the same list on every broker")
	limits := &o.broker
	fs.IntVar(&limits.MaxPayload, "max-payload", broker.DefaultMaxPayload, "bytes of body in one message; past it the message is refused")
	fs.IntVar(&limits.MaxQueueBytes, "max-queue-bytes", broker.DefaultMaxQueueBytes, "outbound bytes queued per connection (at least --max-payload)")
	fs.IntVar(&limits.MaxQueueMessages, "max-queue-messages", broker.DefaultMaxQueueMessages, "outbound messages queued per connection")
	fs.IntVar(&limits.MaxConnections, "max-connections", broker.DefaultMaxConnections, "connections served at once, logging-in ones included")
	fs.IntVar(&limits.MaxNodesPerPrincipal, "max-nodes-per-principal", broker.DefaultMaxNodesPerPrincipal, "nodes one principal may have logged in at once (a principal allowed every channel is not capped)")
	fs.StringVar(&o.mbAddr, "moonbridge", "", "TCP address for MoonBridge backends: their Java client (backend-channel-client) connects here unchanged (docs/moonbridge.md; off unless given)")
	fs.StringVar(&o.mbProxy, "moonbridge-proxy", "", "the node a MoonBridge backend reaches as Endpoint.proxy() (default: the broker's own name)")
	fs.StringVar(&o.mbHosts, "moonbridge-allow-hosts", "", "comma list of the hosts a MoonBridge backend may advertise in its game address (default: any)")
	fs.StringVar(&o.configPath, flagConfig, "", "TOML file of serve's flags (key = flag name; docs/operations.md#configuration)")
	fs.BoolVar(&o.printCfg, flagPrintConfig, false, "print the effective configuration (flags > file > environment > defaults) and exit")
	return fs
}

// parseServe parses serve's arguments, configuration file and environment
// into options and checks them. !ok: serve ends at once with code (a
// usage error, or --print-config done).
func parseServe(args []string, stdio IO) (o *serveOptions, code int, ok bool) {
	o = new(serveOptions)
	fs := serveFlags(o)
	if !parseNoArgs(stdio, "serve", fs, args) {
		return nil, exitUsage, false
	}
	if err := applyConfig(fs, o.configPath, os.LookupEnv); err != nil {
		return nil, usageError(stdio, "serve", "%v", err), false
	}
	if err := checkLimits(fs); err != nil {
		return nil, usageError(stdio, "serve", "%v", err), false
	}
	if o.printCfg {
		printConfig(stdio.Stdout, fs, map[string]string{"data": cmp.Or(o.data, defaultDataDir())})
		return nil, exitOK, false
	}
	bus := &o.broker.Cluster
	if o.natsRelays != "" {
		bus.Relays = strings.Split(o.natsRelays, ",")
	}
	if o.natsURLs != "" {
		bus.URLs = strings.Split(o.natsURLs, ",")
		if o.broker.Name == broker.DefaultName {
			fmt.Fprintln(stdio.Stderr, "busbar serve: --nats needs --name: every broker on a bus has a name of its own")
			return nil, exitUsage, false
		}
		if o.busKeyFile != "" {
			key, err := broker.ReadBusKey(o.busKeyFile)
			if err != nil {
				fmt.Fprintln(stdio.Stderr, "busbar serve: --nats-bus-key:", err)
				return nil, exitUsage, false
			}
			bus.BusKey = key
		}
		if w := natsExposure(bus.URLs, bus.CredsFile, bus.TLSCA, bus.BusKey != nil, bus.SealPayloads); w != "" {
			fmt.Fprintln(stdio.Stderr, "busbar serve: WARNING:", w)
		}
	}
	if err := truesealOnBus(o.truesealAddr, o.truesealKey, bus.Relays); err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return nil, exitUsage, false
	}
	if bus.SealPayloads && bus.BusKey == nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve: --nats-bus-seal needs --nats-bus-key")
		return nil, exitUsage, false
	}
	if err := o.level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve: --log-level:", err)
		return nil, exitUsage, false
	}
	return o, exitOK, true
}

func runServe(args []string, stdio IO) int {
	o, code, ok := parseServe(args, stdio)
	if !ok {
		return code
	}
	s := &serveRun{o: o, stdio: stdio, dir: cmp.Or(o.data, defaultDataDir()),
		log: slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: o.level}))}
	if code := s.start(); code != exitOK {
		_ = s.down.run(context.Background())
		return code
	}
	return s.serve()
}

// serveRun is a running `busbar serve`: the pieces start made, and down,
// the one teardown that stops them.
type serveRun struct {
	o     *serveOptions
	stdio IO
	log   *slog.Logger
	dir   string

	principalsPath string
	store          *auth.Store
	b              *broker.Broker
	eps            []listenSpec
	cx             *cosmixListener
	ts             *truesealListener
	token          string
	hls            []*httpListener
	mb             *moonbridge.Server
	mbLn           net.Listener
	lns            []net.Listener

	wg   sync.WaitGroup // the goroutines serving the pieces
	down closers
}

// closers is serve's teardown: each piece start makes pushes how it
// stops, and run stops them, the last pushed first, on every way out
// (start failing half-way, or a signal).
type closers []func(context.Context) error

func (c *closers) push(stop func(context.Context) error) { *c = append(*c, stop) }

func (c closers) run(ctx context.Context) error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i](ctx))
	}
	return errors.Join(errs...)
}

// start makes the pieces, pushing each one's stop on s.down; a failure
// returns serve's exit status, having said why. Nothing is served yet.
func (s *serveRun) start() int {
	stdio, o, log, dir := s.stdio, s.o, s.log, s.dir
	// With --principals the operator keeps principals elsewhere (say, one
	// file shared by the brokers of a bus): nothing is bootstrapped, so no
	// credentials file appears that the broker would not accept.
	s.principalsPath = o.principals
	if s.principalsPath == "" {
		boot, err := auth.Bootstrap(dir)
		if err != nil {
			log.Error("cannot prepare the data directory", "err", err)
			return exitFail
		}
		if boot.Created {
			fmt.Fprintf(stdio.Stdout, "busbar: created credentials on first start:\n  principals (broker): %s\n  credentials (clients of this OS user): %s\n", boot.PrincipalsPath, boot.CredentialsPath)
		}
		s.principalsPath = boot.PrincipalsPath
	} else if err := auth.PrepareDataDir(dir); err != nil {
		log.Error("cannot prepare the data directory", "err", err)
		return exitFail
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitFail
	}
	s.down.push(func(context.Context) error { unlock(); return nil })
	// The goroutines serving the pieces end once these are stopped.
	s.down.push(func(context.Context) error { s.wg.Wait(); return nil })
	s.store, err = auth.Load(s.principalsPath)
	if err != nil {
		log.Error("cannot load principals", "err", err)
		return exitFail
	}
	for _, note := range s.store.Notes() { // entries older than the state permissions
		log.Warn("principal given default state permissions", "file", s.principalsPath, "detail", note)
	}
	opts := o.broker
	opts.Auth, opts.Logger, opts.StatePath, opts.RelayDir = s.store, log, filepath.Join(dir, "state.db"), filepath.Join(dir, "relay")
	s.b, err = broker.New(opts)
	if err != nil {
		// As it is, not as a log attribute: it names the file, what is
		// wrong and what to do (a state store the broker cannot trust).
		fmt.Fprintln(stdio.Stderr, "busbar serve: cannot start the broker:", err)
		return exitFail
	}
	// The HTTP servers stop after the broker, whose Shutdown closes their
	// WebSocketListeners (docs/ARCHITECTURE.md); s.hls is set below.
	s.down.push(func(ctx context.Context) error {
		err := s.b.Shutdown(ctx)
		closeHTTP(ctx, s.hls)
		return err
	})
	s.eps, err = endpoints(dir, o.unixPath, o.tcpAddr, o.tlsAddr, o.tlsCert, o.tlsKey)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitUsage
	}
	s.cx, err = listenCosmix(o.cosmixAddr, o.cosmixSock, dir, s.b)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		if errors.Is(err, cosmix.ErrNotLoopback) || errors.Is(err, cosmix.ErrUnsafeSocketPath) || errors.Is(err, cosmix.ErrUnixUnsupported) {
			return exitUsage
		}
		return exitFail
	}
	s.down.push(func(context.Context) error { s.cx.close(); return nil })
	s.ts, err = listenTrueseal(o.truesealAddr, dir, o.truesealKey, o.broker.Cluster.Relays, s.b)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitFail
	}
	s.down.push(func(context.Context) error { s.ts.close(); return nil }) // before the broker closes the relay store
	s.token, _, err = ops.LoadToken(dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve: the HTTP token:", err)
		return exitFail
	}
	httpSock, note := httpSocketPath(o.httpUnix, o.unixPath, dir)
	if note != "" {
		log.Warn(note)
	}
	store, principalsPath := s.store, s.principalsPath
	s.hls, err = serveHTTPFlags(o.httpAddr, o.httpsAddr, httpSock, o.tlsCert, o.tlsKey, o.wsOrigins, ops.Options{Broker: s.b, Token: s.token, DataDir: dir, Version: readBuildInfo().Version, Collectors: append(s.ts.collectors(), s.cx.collectors()...),
		ReloadPrincipals: func() (string, error) { return principalsPath, reloadPrincipals(store, principalsPath, log, "http") }})
	if err != nil {
		if transport.IsNoUnixSockets(err) {
			err = noUnixSockets("unix://" + httpSock)
		}
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		if errors.Is(err, errHTTPSNeedsCert) {
			return exitUsage
		}
		return exitFail
	}
	s.mb, s.mbLn, err = startMoonBridge(o.mbAddr, o.mbProxy, o.mbHosts, s.b, s.store, log)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitFail
	}
	if s.mb != nil {
		s.down.push(func(context.Context) error {
			_ = s.mb.Close()   // GOODBYE to the backends, before their nodes go
			_ = s.mbLn.Close() // when it was never served
			return nil
		})
	}
	s.lns, err = listenAll(s.eps)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar serve:", err)
		return exitFail
	}
	checkFileLimit(log, s.doorLimits())
	return exitOK
}

// listenAll opens the broker's stream listeners; on a failure it closes
// those it opened. Once served, the broker's Shutdown closes them.
func listenAll(eps []listenSpec) ([]net.Listener, error) {
	var lns []net.Listener
	for _, ep := range eps {
		ln, err := transport.Listen(ep.Endpoint, ep.tls)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, listenError(ep.Endpoint, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// serve announces and serves what start made until SIGINT or SIGTERM (or
// a listener failing), then stops it all (s.down).
func (s *serveRun) serve() int {
	stdio, log, b := s.stdio, s.log, s.b
	// Held until the teardown is done: a second signal does not cut the
	// graceful stop short.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Registered before the listeners are announced: a SIGHUP from then
	// on reloads, never kills.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s.wg.Go(func() { reloadOnHangup(ctx, hup, s.store, s.principalsPath, log) })
	// Before the stream listeners: a script that waits for the tcp line
	// has the ws line too.
	for _, h := range s.hls {
		h.announce(stdio.Stdout, s.token)
		s.wg.Go(func() { _ = b.Serve(h.bus) }) // ends at Shutdown
		s.wg.Go(func() {
			if err := h.serve(); err != nil {
				log.Error("HTTP listener failed", "url", h.url, "err", err)
				stop()
			}
		})
	}
	if s.mb != nil {
		fmt.Fprintf(stdio.Stdout, "busbar: moonbridge backends on %s (proxy node %s)\n", s.mbLn.Addr(), cmp.Or(s.o.mbProxy, b.Name()))
		if strings.TrimSpace(strings.ReplaceAll(s.o.mbHosts, ",", "")) == "" {
			// MoonBridge's proxy requires its allowedHosts; busbar takes
			// any host without the flag, and says so at start.
			log.Warn("moonbridge: --moonbridge-allow-hosts is not set: a backend may advertise a game address on any host (MoonBridge's proxy takes only its allowedHosts)")
		}
		// principal add --moonbridge prints the port in use from here.
		addrFile := filepath.Join(s.dir, moonbridgeAddrFile)
		if err := os.WriteFile(addrFile, []byte(s.mbLn.Addr().String()+"\n"), 0o600); err == nil {
			s.down.push(func(context.Context) error { _ = os.Remove(addrFile); return nil })
		}
		s.wg.Go(func() {
			if err := s.mb.Serve(s.mbLn); err != nil && !errors.Is(err, moonbridge.ErrServerClosed) {
				log.Error("moonbridge listener failed", "address", s.mbLn.Addr().String(), "err", err)
				stop()
			}
		})
	}
	for i, ln := range s.lns {
		ep := s.eps[i].Endpoint
		if ep.Scheme != transport.SchemeUnix {
			ep.Address = ln.Addr().String() // the real port when :0 was asked
		}
		fmt.Fprintf(stdio.Stdout, "busbar: listening on %s\n", ep)
		s.wg.Go(func() {
			if err := b.Serve(ln); err != nil && !errors.Is(err, broker.ErrClosed) {
				log.Error("listener failed", "endpoint", ep, "err", err)
				stop()
			}
		})
	}
	s.cx.serve(&s.wg, stdio.Stdout, log, stop)
	s.ts.serve(&s.wg, stdio.Stdout, log, stop)
	log.Info("broker ready", "name", b.Name(), "data", s.dir)
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.down.run(sctx); err != nil {
		log.Error("shutdown was not clean", "err", err)
		return exitFail
	}
	log.Info("stopped")
	return exitOK
}

// moonbridgeAddrFile, in the data directory, holds the address the
// running broker's --moonbridge listener is bound to, while it runs.
const moonbridgeAddrFile = "moonbridge.addr"

// startMoonBridge makes the MoonBridge listener of --moonbridge ADDR, or
// nothing when addr is empty.
func startMoonBridge(addr, proxy, hosts string, b *broker.Broker, store *auth.Store, log *slog.Logger) (*moonbridge.Server, net.Listener, error) {
	if addr == "" || addr == "off" {
		return nil, nil, nil
	}
	cfg := moonbridge.Config{Keys: store, Dial: b.DialInProcessAs, ProxyNode: cmp.Or(proxy, b.Name()), Logger: log, Door: b.Door()}
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

// reloadMu serialises reloadPrincipals.
var reloadMu sync.Mutex

// reloadPrincipals reloads path into store and logs the outcome; on
// error the previous principals stay in force. why is what asked
// (SIGHUP, or busbar principal over the HTTP API).
func reloadPrincipals(store *auth.Store, path string, log *slog.Logger, why string) error {
	// One at a time: two reloads racing could swap in the older read last.
	reloadMu.Lock()
	defer reloadMu.Unlock()
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
