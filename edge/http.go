package edge

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// What an HTTP-based door (serve's HTTP listener, --cosmix) lets a peer
// that has not authenticated hold (docs/operations.md#doors). A
// connection counts as unauthenticated from its accept until its first
// request with the token, or its upgrade (where the protocol behind it
// takes over), and it holds a place in the broker's login pool of its
// kind all that time (broker.HoldLoginPlace): MaxHandshakes places for
// network peers and as many for local ones, MaxHandshakesPerAddr per
// network address; the place past its grace with the least of a hello
// (an HTTP one has none), the oldest of those, is closed to make room.
// What one such connection can make the process hold is its request
// line and headers (HTTPMaxHeaderBytes, plus the 4 KiB of slack and the
// 4 KiB read and write buffers of net/http) and a goroutine.
const (
	// HTTPMaxHeaderBytes bounds a request's line and headers; a request
	// over it is answered 431 and its connection closed.
	HTTPMaxHeaderBytes = 16 << 10
	// HTTPReadHeaderTimeout bounds how long a peer may take to send a
	// request's headers, so idle peers cannot hold goroutines.
	HTTPReadHeaderTimeout = 5 * time.Second
	// HTTPIdleTimeout closes a keep-alive connection idle this long
	// between requests.
	HTTPIdleTimeout = 30 * time.Second
)

// Hold counts nc, accepted by a door and not yet authenticated, in the
// shared pre-login admission, and returns what gives its place back
// (idempotent); when there is no room it closes nc and returns a no-op.
// broker.(*Broker).HoldLoginPlace is the one busbar serve uses.
type Hold func(nc net.Conn) (release func())

// HTTPServer returns an http.Server with the settings every HTTP-based
// door shares, serving h, and a listener wrapper for it: each connection
// ln accepts holds an admission place (hold; nil: none) until its first
// authenticated request (call authenticated from the handler), its
// hijack (an upgrade: the protocol behind it takes over), or its close.
// door names the listener in the accept log.
func HTTPServer(h http.Handler, ln net.Listener, door string, log *slog.Logger, hold Hold) (srv *http.Server, wrapped net.Listener, authenticated func(*http.Request)) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: HTTPReadHeaderTimeout,
		MaxHeaderBytes:    HTTPMaxHeaderBytes,
		IdleTimeout:       HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	wrapped = Listener(ln, door, log)
	if hold == nil {
		return srv, wrapped, func(*http.Request) {}
	}
	wrapped = &admitListener{Listener: wrapped, hold: hold}
	return srv, wrapped, admitHTTP(srv)
}

// admitListener counts each connection it accepts in the broker's login
// pool until release.
type admitListener struct {
	net.Listener
	hold func(net.Conn) (release func())
}

func (l *admitListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &pendingConn{Conn: nc, release: l.hold(nc)}, nil
}

// pendingConn is an accepted connection and its place in the login pool.
type pendingConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// authenticated gives the place back: the peer proved it has the token,
// or its connection is the bus's now, or it is closed.
func (c *pendingConn) authenticated() { c.once.Do(c.release) }

func (c *pendingConn) Close() error {
	c.authenticated()
	return c.Conn.Close()
}

// pendingOf finds the pendingConn under what net/http sees (a TLS
// connection wraps it).
func pendingOf(nc net.Conn) *pendingConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	pc, _ := nc.(*pendingConn)
	return pc
}

type pendingKey struct{}

// admitHTTP sets srv up to give a connection's place back on its first
// authenticated request (authenticated, for ops.Options.Authenticated),
// when it is hijacked for the bus, or when it closes.
func admitHTTP(srv *http.Server) (authenticated func(*http.Request)) {
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if pc := pendingOf(nc); pc != nil {
			return context.WithValue(ctx, pendingKey{}, pc)
		}
		return ctx
	}
	srv.ConnState = func(nc net.Conn, st http.ConnState) {
		if st == http.StateHijacked || st == http.StateClosed {
			if pc := pendingOf(nc); pc != nil {
				pc.authenticated()
			}
		}
	}
	return func(r *http.Request) {
		if pc, ok := r.Context().Value(pendingKey{}).(*pendingConn); ok {
			pc.authenticated()
		}
	}
}
