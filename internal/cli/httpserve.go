package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"busbar/edge"
	"busbar/ops"
	"busbar/transport"
	"busbar/web"
)

// defaultHTTP is serve's loopback HTTP listener: the bus over WebSocket and
// the browser client (docs/browser.md).
const defaultHTTP = "127.0.0.1:7475"

// errHTTPSNeedsCert is a usage error of serve's.
var errHTTPSNeedsCert = errors.New("--https needs --tls-cert and --tls-key")

// httpSocketSuffix names the HTTP socket after the bus's: busbar.sock's is
// busbar-http.sock, beside it (docs/operations.md#the-http-socket), so two
// brokers whose sockets share a directory do not share an HTTP socket.
const httpSocketSuffix = "-http.sock"

// httpListener is one HTTP server of serve (plain, TLS, or on a Unix
// socket) and the WebSocketListener the broker serves behind it.
type httpListener struct {
	url  string // what a page connects to: ws://host:port/bus
	page string // the listener's own base URL: http://host:port; empty on a Unix socket
	sock string // the Unix socket's path, when it is one
	bus  *transport.WebSocketListener
	srv  *http.Server
	ln   net.Listener
}

// listenHTTP opens the HTTP listeners --http, --https and --http-unix ask
// for ("off" or empty: none). origins is --ws-origin's comma list; the
// operator's endpoints (package ops) are served on each listener.
func listenHTTP(httpAddr, httpsAddr, sock string, tlsCfg *tls.Config, origins string, operator ops.Options) ([]*httpListener, error) {
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
		h := newHTTPListener(ln, opts, operator)
		h.url = "ws://" + ln.Addr().String() + transport.WebSocketPath
		h.page = "http://" + ln.Addr().String()
		if a.tls {
			h.ln = tls.NewListener(h.ln, tlsCfg)
			h.url = "wss://" + ln.Addr().String() + transport.WebSocketPath
			h.page = "https://" + ln.Addr().String()
		}
		out = append(out, h)
	}
	if sock != "" && sock != "off" {
		// 0600 in its directory (transport.Listen), so only the broker's
		// OS user connects; the token is still asked for.
		ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: sock}, nil)
		if err != nil {
			return fail(fmt.Errorf("--http-unix: %w", err))
		}
		h := newHTTPListener(ln, opts, operator)
		h.sock, h.url = sock, "unix://"+sock
		out = append(out, h)
	}
	return out, nil
}

func newHTTPListener(ln net.Listener, opts transport.WebSocketOptions, operator ops.Options) *httpListener {
	h := &httpListener{bus: transport.NewWebSocketListener(ln.Addr(), opts)}
	var hold edge.Hold
	var log *slog.Logger
	if operator.Broker != nil {
		hold, log = operator.Broker.HoldLoginPlace, operator.Broker.Logger()
	}
	mux := web.Handler(h.bus)
	h.srv, h.ln, operator.Authenticated = edge.HTTPServer(mux, ln, "http", log, hold)
	ops.Register(mux, operator)
	return h
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

// serveHTTPFlags opens what serve's --http, --https, --http-unix and
// --ws-origin ask for.
func serveHTTPFlags(httpAddr, httpsAddr, sock, cert, key, origins string, operator ops.Options) ([]*httpListener, error) {
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
	return listenHTTP(httpAddr, httpsAddr, sock, cfg, origins, operator)
}

// maxSocketPath is the longest path a Unix socket may have (sun_path is
// 108 bytes on Linux, with its terminating NUL).
const maxSocketPath = 107

// httpSocketPath is --http-unix's path: as given, or beside the bus's
// Unix socket, named after it (the default socket's when that is off).
// A default path too long for a socket is "off", with a note saying so:
// the bus's own socket may just fit where the longer name does not.
func httpSocketPath(flag, unixPath, dir string) (path, note string) {
	if flag != "" {
		return flag, ""
	}
	if unixPath == "" || unixPath == "off" {
		unixPath = filepath.Join(dir, socketName)
	}
	path = strings.TrimSuffix(unixPath, filepath.Ext(unixPath)) + httpSocketSuffix
	if len(path) > maxSocketPath {
		return "off", "no HTTP socket: " + path + " is longer than a socket path may be; set --http-unix"
	}
	return path, ""
}

// announce prints where h listens: a URL a page connects to and the
// dashboard's, or, on a Unix socket, how to reach it.
func (h *httpListener) announce(w io.Writer, token string) {
	if h.sock != "" {
		fmt.Fprintf(w, "busbar: HTTP on unix://%s (curl --unix-socket %s http://busbar%s)\n", h.sock, h.sock, ops.ReadyPath)
		return
	}
	fmt.Fprintf(w, "busbar: listening on %s\n", h.url)
	fmt.Fprintf(w, "busbar: dashboard at %s\n", h.dashboardURL(token))
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
