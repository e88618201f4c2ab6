package cli

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// What serve's HTTP listener lets a peer that has not authenticated hold
// (docs/messaging.md#limits). A connection counts as unauthenticated from
// its accept until its first request with the token, or its upgrade to
// the bus over WebSocket (where the bus's handshake takes over), and it
// holds a place in the broker's login pool of its kind all that time
// (broker.HoldLoginPlace): MaxHandshakes places for network peers and as
// many for local ones, MaxHandshakesPerAddr per network address; the
// place past its grace with the least of a hello (an HTTP one has none),
// the oldest of those, is closed to make room. What one such connection can make serve
// hold is its request line and headers (httpMaxHeaderBytes, plus the
// 4 KiB of slack and the 4 KiB read and write buffers of net/http) and a
// goroutine.
const (
	// httpMaxHeaderBytes bounds a request's line and headers; a request
	// over it is answered 431 and its connection closed.
	httpMaxHeaderBytes = 16 << 10
	// httpIdleTimeout closes a keep-alive connection idle this long
	// between requests.
	httpIdleTimeout = 30 * time.Second
)

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
