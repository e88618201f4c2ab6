package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"busbar/auth"
	"busbar/broker"
	"busbar/edge/cosmix"
)

// cosmixListener is serve's --cosmix and --cosmix-socket: cosmix-noded's
// client protocol on a loopback address and on the native Unix socket
// (docs/cosmix.md). The zero value is off.
type cosmixListener struct {
	ln  net.Listener         // --cosmix; nil when off
	uln *cosmix.UnixListener // --cosmix-socket; nil when off
	srv *cosmix.Server
}

// listenCosmix opens --cosmix ADDR and --cosmix-socket PATH ("" or "off":
// not that one), refusing an address that is not loopback and a socket
// path others could change. The socket's connections log in with the
// owner's credential, <dir>/credentials.json.
func listenCosmix(addr, sock, dir string, b *broker.Broker) (*cosmixListener, error) {
	addr, sock = offToEmpty(addr), offToEmpty(sock)
	if addr == "" && sock == "" {
		return &cosmixListener{}, nil
	}
	cfg := cosmix.Config{Dial: cosmix.Dialer(b), BrokerName: b.Name(), Version: readBuildInfo().Version, Door: b.Door()}
	if sock != "" {
		path := filepath.Join(dir, auth.CredentialsFile)
		cred, err := auth.LoadCredential(path)
		if err != nil {
			return nil, fmt.Errorf("--cosmix-socket: its connections log in as the owner, whose credential is not readable: %w", err)
		}
		cfg.Owner = cred
	}
	srv, err := cosmix.New(cfg)
	if err != nil {
		return nil, err
	}
	c := &cosmixListener{srv: srv}
	if addr != "" {
		if c.ln, err = cosmix.Listen(addr); err != nil {
			return nil, fmt.Errorf("--cosmix: %w", err)
		}
	}
	if sock != "" {
		if c.uln, err = srv.ListenUnix(sock); err != nil {
			c.close()
			return nil, fmt.Errorf("--cosmix-socket: %w", err)
		}
	}
	return c, nil
}

func offToEmpty(v string) string {
	if v == "off" {
		return ""
	}
	return v
}

// serve prints the URL a cosmix app is given and serves it on wg; a
// failure calls stop.
func (c *cosmixListener) serve(wg *sync.WaitGroup, w io.Writer, log *slog.Logger, stop func()) {
	if c.srv == nil {
		return
	}
	if c.uln != nil {
		fmt.Fprintf(w, "busbar: cosmix apps connect natively to %s (broker account uid %d gid %d)\n", c.uln.Path(), os.Geteuid(), os.Getegid())
		wg.Go(func() {
			if err := c.srv.ServeUnix(c.uln); !errors.Is(err, cosmix.ErrServerClosed) {
				log.Error("cosmix socket failed", "err", err)
				stop()
			}
		})
	}
	if c.ln != nil {
		fmt.Fprintf(w, "busbar: cosmix apps connect to ws://%s%s?%s=PRINCIPAL:SECRET\n", c.ln.Addr(), cosmix.Path, cosmix.TokenParam)
		wg.Go(func() {
			if err := c.srv.Serve(c.ln); !errors.Is(err, cosmix.ErrServerClosed) {
				log.Error("cosmix listener failed", "err", err)
				stop()
			}
		})
	}
}

// collectors are the cosmix figures for /metrics (none when off).
func (c *cosmixListener) collectors() []prometheus.Collector {
	if c.srv == nil {
		return nil
	}
	return []prometheus.Collector{cosmix.NewCollector(c.srv)}
}

// close closes the cosmix connections (their nodes log out) and the
// listener; it may be called more than once.
func (c *cosmixListener) close() {
	if c.srv == nil {
		return
	}
	_ = c.srv.Close() // the Unix socket too
	if c.ln != nil {
		_ = c.ln.Close()
	}
}
