package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"busbar/ops"
	"busbar/transport"
	"busbar/web"
)

// defaultHTTP is serve's loopback HTTP listener: the bus over WebSocket and
// the browser client (docs/browser.md).
const defaultHTTP = "127.0.0.1:7475"

// httpReadHeaderTimeout bounds how long a peer may take to send a
// request's headers, so idle peers cannot hold the HTTP listener's
// goroutines.
const httpReadHeaderTimeout = 5 * time.Second

// errHTTPSNeedsCert is a usage error of serve's.
var errHTTPSNeedsCert = errors.New("--https needs --tls-cert and --tls-key")

// httpListener is one HTTP server of serve (plain or TLS) and the
// WebSocketListener the broker serves behind it.
type httpListener struct {
	url  string // what a page connects to: ws://host:port/bus
	page string // the listener's own base URL: http://host:port
	bus  *transport.WebSocketListener
	srv  *http.Server
	ln   net.Listener
}

// listenHTTP opens the HTTP listeners --http and --https ask for ("off" or
// empty: none). origins is --ws-origin's comma list; the operator's
// endpoints (package ops) are served on each listener.
func listenHTTP(httpAddr, httpsAddr string, tlsCfg *tls.Config, origins string, operator ops.Options) ([]*httpListener, error) {
	var out []*httpListener
	fail := func(err error) ([]*httpListener, error) {
		for _, h := range out {
			_ = h.ln.Close()
		}
		return nil, err
	}
	opts := transport.WebSocketOptions{}
	for o := range strings.SplitSeq(origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			opts.Origins = append(opts.Origins, o)
		}
	}
	for _, a := range []struct {
		flag, addr string
		tls        bool
	}{{"--http", httpAddr, false}, {"--https", httpsAddr, true}} {
		if a.addr == "" || a.addr == "off" {
			continue
		}
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", a.flag, err))
		}
		h := &httpListener{ln: ln, bus: transport.NewWebSocketListener(ln.Addr(), opts)}
		mux := web.Handler(h.bus)
		ops.Register(mux, operator)
		h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout}
		h.url = "ws://" + ln.Addr().String() + transport.WebSocketPath
		h.page = "http://" + ln.Addr().String()
		if a.tls {
			h.ln = tls.NewListener(ln, tlsCfg)
			h.url = "wss://" + ln.Addr().String() + transport.WebSocketPath
			h.page = "https://" + ln.Addr().String()
		}
		out = append(out, h)
	}
	return out, nil
}

// serve runs the HTTP server until close.
func (h *httpListener) serve() error {
	if err := h.srv.Serve(h.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// close stops the HTTP server once the broker has shut down (which closed
// the WebSocketListener and every connection it handed over).
func (h *httpListener) close(ctx context.Context) {
	if err := h.srv.Shutdown(ctx); err != nil {
		_ = h.srv.Close()
	}
	_ = h.ln.Close() // when it was never served
}

// serveHTTPFlags opens what serve's --http, --https and --ws-origin ask for.
func serveHTTPFlags(httpAddr, httpsAddr, cert, key, origins string, operator ops.Options) ([]*httpListener, error) {
	var cfg *tls.Config
	if httpsAddr != "" && httpsAddr != "off" {
		if cert == "" || key == "" {
			return nil, errHTTPSNeedsCert
		}
		var err error
		if cfg, err = transport.LoadTLS(cert, key); err != nil {
			return nil, err
		}
	}
	return listenHTTP(httpAddr, httpsAddr, cfg, origins, operator)
}

// dashboardURL is the URL serve prints for a person to open: the
// dashboard with the token in it (docs/operations.md#access).
func (h *httpListener) dashboardURL(token string) string {
	return h.page + ops.DashboardPath + "?" + ops.TokenParam + "=" + token
}

func closeHTTP(ctx context.Context, hls []*httpListener) {
	for _, h := range hls {
		h.close(ctx)
	}
}
