package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/flynn/noise"
	"github.com/prometheus/client_golang/prometheus"

	"busbar/broker"
	"busbar/edge/trueseal"
)

// `busbar serve --trueseal ADDR`: a trueseal relay (package trueseal) on
// the broker's relay store, and `busbar trueseal key`, the relay's public
// key as trueseal clients are configured with it (docs/trueseal.md).

// errTruesealKeyOnBus: on a bus whose inboxes live on home brokers, a
// trueseal client may reach its inbox through any broker with --trueseal,
// but only if each one holds the relay key the client pins: one key file,
// given to each, rather than a key each broker creates for itself.
var errTruesealKeyOnBus = errors.New("--trueseal with --nats-relays needs --trueseal-key FILE, the same key file on every broker with --trueseal (trueseal clients pin the relay's key; `busbar trueseal key --trueseal-key FILE` creates one): docs/trueseal.md#on-a-bus")

// truesealOnBus refuses --trueseal on a bus with relay brokers without
// --trueseal-key.
func truesealOnBus(addrs, keyFile string, busRelays []string) error {
	if addrs != "" && addrs != "off" && len(busRelays) > 0 && keyFile == "" {
		return errTruesealKeyOnBus
	}
	return nil
}

type truesealListener struct {
	lns     []net.Listener
	srv     *trueseal.Server
	keyPath string
	created bool
}

// listenTrueseal opens the trueseal listeners on addrs (a comma list;
// "" or "off": none), each serving push and receive sessions alike, over
// b's inboxes (on a bus with relay brokers, each on its home), with the
// relay key in keyFile, or else in data directory dir. Two addresses are
// for an SDK that dials trueseal-relay's two ports.
func listenTrueseal(addrs, dir, keyFile string, busRelays []string, b *broker.Broker) (*truesealListener, error) {
	if addrs == "" || addrs == "off" {
		return &truesealListener{}, nil
	}
	if err := truesealOnBus(addrs, keyFile, busRelays); err != nil {
		return nil, err
	}
	inboxes, err := trueseal.BusInboxes(b)
	if err != nil {
		return nil, fmt.Errorf("--trueseal: %w", err)
	}
	var key noise.DHKey
	created, keyPath := false, keyFile
	if keyFile != "" {
		key, err = trueseal.LoadKeyFile(keyFile) // never created here: each broker would make its own
	} else {
		key, created, err = trueseal.LoadOrCreateKey(dir)
		keyPath = trueseal.KeyPath(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("--trueseal: the relay key: %w", err)
	}
	// On a bus with relay brokers, a broker whose key differs from the
	// others' serves nothing: its clients' handshakes would fail.
	if err := trueseal.JoinBus(context.Background(), b, key.Public); err != nil {
		return nil, fmt.Errorf("--trueseal: %w; give every broker with --trueseal the same --trueseal-key file (docs/trueseal.md#the-relay-key-on-a-bus)", err)
	}
	srv, err := trueseal.NewServer(trueseal.Options{Key: key, Store: b.RelayStore(), Inboxes: inboxes, Door: b.Door()})
	if err != nil {
		return nil, err
	}
	t := &truesealListener{srv: srv, keyPath: keyPath, created: created}
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
func init() {
	addVerb(runTrueseal, []helpPage{
		{path: "trueseal", summary: "the trueseal relay of `busbar serve --trueseal ADDR`: its key",
			text: `busbar serve --trueseal ADDR is a relay for trueseal's own clients
(trueseal-sync and its bindings), storing into the broker's relay store
(docs/trueseal.md).`,
			example: "$ busbar trueseal key"},
		{path: "trueseal key", summary: "print the trueseal relay's public key, as trueseal clients are configured with it",
			text: `Prints the relay's X25519 static public key in hex (64 digits), the
relay key a trueseal app is built with. The key is <data>/trueseal.key,
owner-only; it is created, like serve --trueseal does on its first
start, when there is none. With --trueseal-key FILE it is that file,
created if missing: on a bus, the one file every broker with --trueseal
is given (serve --trueseal-key FILE; docs/trueseal.md#on-a-bus).`,
			exit:    "0  printed\n1  the key file could not be read or created (other users can read it, not a key)\n2  usage",
			example: "$ busbar trueseal key --data /var/lib/busbar\n$ busbar trueseal key --trueseal-key /etc/busbar/trueseal.key"},
	})
}

func runTrueseal(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "trueseal", args); !ok {
		return code
	}
	fs := flag.NewFlagSet("busbar trueseal key", flag.ContinueOnError)
	data := new(string)
	fs.Var(dirFlag{data}, "data", "data directory of the broker (env "+envData+"; default ~/.local/state/busbar)")
	keyFile := fs.String("trueseal-key", "", "the key `FILE` to print (created if missing, in an existing directory), as serve --trueseal-key takes it (default <data>/trueseal.key)")
	if !parseNoArgs(stdio, "trueseal key", fs, args[1:]) {
		return exitUsage
	}
	dir := cmp.Or(*data, defaultDataDir())
	path := trueseal.KeyPath(dir)
	var key noise.DHKey
	var created bool
	var err error
	if *keyFile != "" {
		path = *keyFile
		key, created, err = trueseal.LoadOrCreateKeyFile(path)
	} else {
		key, created, err = trueseal.LoadOrCreateKey(dir)
	}
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "busbar trueseal key:", err)
		return exitFail
	}
	if created {
		fmt.Fprintf(stdio.Stderr, "busbar trueseal key: created %s\n", path)
	}
	fmt.Fprintln(stdio.Stdout, trueseal.PublicKeyText(key.Public))
	return exitOK
}
