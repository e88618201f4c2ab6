package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"busbar/broker"
	"busbar/cosmix"
)

// cosmixListener is serve's --cosmix: cosmix-noded's client protocol on a
// loopback address (docs/cosmix.md). The zero value is off.
type cosmixListener struct {
	ln  net.Listener
	srv *cosmix.Server
}

// listenCosmix opens --cosmix ADDR ("" or "off": nothing), refusing an
// address that is not loopback.
func listenCosmix(addr string, b *broker.Broker, log *slog.Logger) (*cosmixListener, error) {
	if addr == "" || addr == "off" {
		return &cosmixListener{}, nil
	}
	srv, err := cosmix.New(cosmix.Config{Dial: cosmix.Dialer(b), BrokerName: b.Name(), Version: readBuildInfo().Version, Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := cosmix.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("--cosmix: %w", err)
	}
	return &cosmixListener{ln: ln, srv: srv}, nil
}

// serve prints the URL a cosmix app is given and serves it on wg; a
// failure calls stop.
func (c *cosmixListener) serve(wg *sync.WaitGroup, w io.Writer, log *slog.Logger, stop func()) {
	if c.srv == nil {
		return
	}
	fmt.Fprintf(w, "busbar: cosmix apps connect to ws://%s%s?%s=PRINCIPAL:SECRET\n", c.ln.Addr(), cosmix.Path, cosmix.TokenParam)
	wg.Go(func() {
		if err := c.srv.Serve(c.ln); !errors.Is(err, cosmix.ErrServerClosed) {
			log.Error("cosmix listener failed", "err", err)
			stop()
		}
	})
}

// close closes the cosmix connections (their nodes log out) and the
// listener; it may be called more than once.
func (c *cosmixListener) close() {
	if c.srv == nil {
		return
	}
	_ = c.srv.Close()
	_ = c.ln.Close()
}
