package transport

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// WebSocketOptions configures a WebSocketListener.
type WebSocketOptions struct {
	// Origins lists the browser origins allowed beyond the defaults (the
	// listener's own origin and loopback pages), as patterns matched with
	// path.Match against the origin's host:port ("app.example:8443",
	// "*.example.com:*") or, when the pattern has "://", against
	// scheme://host:port.
	Origins []string
}

// ErrOriginRefused is what a WebSocketListener answers (403) to a browser
// page whose origin it does not allow.
var ErrOriginRefused = errors.New("transport: websocket origin not allowed")

// WebSocketListener takes WebSocket connections from an HTTP server (it is
// the http.Handler to mount at WebSocketPath) and hands each, as the
// length-prefixed stream every transport carries, to whoever calls Accept:
// a broker serves it with Serve, like any listener.
//
// The origin check: a request without an Origin header (not a browser) is
// allowed, authentication decides. A browser page is allowed when it is a
// loopback page (http or https on localhost, 127.0.0.0/8 or [::1], any
// port) asking a loopback Host; over TLS, when its origin is the server's
// own (the Host it asked); or when it matches WebSocketOptions.Origins.
// Any other page gets 403. A DNS-rebinding page, whose origin and Host both
// name the attacker's host, is thus refused on plain HTTP.
type WebSocketListener struct {
	addr    net.Addr
	origins []string
	conns   chan net.Conn
	done    chan struct{}
	close   sync.Once
}

// NewWebSocketListener returns a listener that reports addr (the HTTP
// server's address) as its own.
func NewWebSocketListener(addr net.Addr, opts WebSocketOptions) *WebSocketListener {
	return &WebSocketListener{addr: addr, origins: opts.Origins, conns: make(chan net.Conn), done: make(chan struct{})}
}

// ServeHTTP upgrades the request and waits until Accept takes the
// connection or the listener closes.
func (l *WebSocketListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-l.done:
		http.Error(w, "busbar: not accepting connections", http.StatusServiceUnavailable)
		return
	default:
	}
	if err := l.checkOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	// The origin is checked above, by rules the library does not have.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept has answered the request
	}
	c := newWSConn(ws)
	select {
	case l.conns <- c:
	case <-l.done:
		c.abort()
	}
}

// Accept waits for the next WebSocket connection.
func (l *WebSocketListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; later upgrade requests get 503. Connections already
// accepted are their owners' to close.
func (l *WebSocketListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return nil
}

// Addr is the HTTP server's address.
func (l *WebSocketListener) Addr() net.Addr { return l.addr }

func (l *WebSocketListener) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return refused(origin)
	}
	if IsLoopbackHost(u.Host) && IsLoopbackHost(r.Host) {
		return nil
	}
	// Over TLS the certificate vouches for the Host; over plain HTTP a
	// rebinding page would pass this rule with the attacker's name.
	if r.TLS != nil && strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	for _, p := range l.origins {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return nil
		}
	}
	return refused(origin)
}

func refused(origin string) error {
	return errors.Join(ErrOriginRefused, errors.New("busbar: a page from "+origin+" may not connect (see docs/browser.md#origins)"))
}

// IsLoopbackHost reports whether hostport names this machine: localhost
// or a loopback address, with or without a port. Every door that admits
// only this machine's pages or peers asks it.
func IsLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
