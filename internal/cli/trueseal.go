package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"busbar/broker"
	"busbar/trueseal"
)

// `busbar serve --trueseal ADDR`: a trueseal relay (package trueseal) on
// the broker's relay store, and `busbar trueseal key`, the relay's public
// key as trueseal clients are configured with it (docs/trueseal.md).

// errTruesealOnBus: trueseal inboxes are the local store's; on a bus
// whose inboxes live on home brokers they would not be the bus's.
var errTruesealOnBus = errors.New("--trueseal with --nats-relays: trueseal inboxes are kept in this broker's own store and are not reachable through the other brokers of the bus yet (docs/trueseal.md#on-a-bus)")

type truesealListener struct {
	lns     []net.Listener
	srv     *trueseal.Server
	keyPath string
	created bool
}

// listenTrueseal opens the trueseal listeners on addrs (a comma list;
// "" or "off": none), each serving push and receive sessions alike, over
// b's relay store, with the relay key of data directory dir. Two
// addresses are for an SDK that dials trueseal-relay's two ports.
func listenTrueseal(addrs, dir string, busRelays []string, b *broker.Broker) (*truesealListener, error) {
	if addrs == "" || addrs == "off" {
		return &truesealListener{}, nil
	}
	if len(busRelays) > 0 {
		return nil, errTruesealOnBus
	}
	st := b.RelayStore()
	if st == nil {
		return nil, errors.New("--trueseal: this broker keeps no relay store")
	}
	key, created, err := trueseal.LoadOrCreateKey(dir)
	if err != nil {
		return nil, fmt.Errorf("--trueseal: the relay key: %w", err)
	}
	srv, err := trueseal.NewServer(trueseal.Options{Key: key, Store: st})
	if err != nil {
		return nil, err
	}
	t := &truesealListener{srv: srv, keyPath: trueseal.KeyPath(dir), created: created}
	for _, addr := range strings.Split(addrs, ",") {
		ln, err := net.Listen("tcp", strings.TrimSpace(addr))
		if err != nil {
			t.close()
			return nil, fmt.Errorf("--trueseal: cannot listen on %s: %w", addr, err)
		}
		t.lns = append(t.lns, ln)
	}
	return t, nil
}

// serve prints where trueseal clients connect and the key they are
// configured with, and serves on wg; a failure calls stop.
func (t *truesealListener) serve(wg *sync.WaitGroup, w io.Writer, log *slog.Logger, stop func()) {
	if t.srv == nil {
		return
	}
	if t.created {
		fmt.Fprintf(w, "busbar: created the trueseal relay key on first start: %s\n", t.keyPath)
	}
	for _, ln := range t.lns {
		fmt.Fprintf(w, "busbar: trueseal relay on tcp://%s (push and receive sessions), relay public key %s\n", ln.Addr(), trueseal.PublicKeyText(t.srv.PublicKey()))
		wg.Go(func() {
			if err := t.srv.Serve(ln); !errors.Is(err, trueseal.ErrClosed) {
				log.Error("trueseal listener failed", "err", err)
				stop()
			}
		})
	}
}

// collectors are the trueseal figures for /metrics (none when off).
func (t *truesealListener) collectors() []prometheus.Collector {
	if t.srv == nil {
		return nil
	}
	return []prometheus.Collector{trueseal.NewCollector(t.srv)}
}

// close ends the trueseal sessions and the listener; it may be called
// more than once, and must be before the broker's Shutdown closes the
// store.
func (t *truesealListener) close() {
	if t.srv == nil {
		return
	}
	_ = t.srv.Close()
	for _, ln := range t.lns {
		_ = ln.Close() // when serve never ran
	}
}

func runTrueseal(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "trueseal", args); !ok {
		return code
	}
	fs := flag.NewFlagSet("busbar trueseal key", flag.ContinueOnError)
	data := new(string)
	fs.Var(dirFlag{data}, "data", "data directory of the broker (env "+envData+"; default ~/.local/state/busbar)")
	if !parseNoArgs(stdio, "trueseal key", fs, args[1:]) {
		return exitUsage
	}
	dir := cmp.Or(*data, defaultDataDir())
	key, created, err := trueseal.LoadOrCreateKey(dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar trueseal key:", err)
		return exitFail
	}
	if created {
		fmt.Fprintf(stdio.Stderr, "busbar trueseal key: created %s\n", trueseal.KeyPath(dir))
	}
	fmt.Fprintln(stdio.Stdout, trueseal.PublicKeyText(key.Public))
	return exitOK
}
