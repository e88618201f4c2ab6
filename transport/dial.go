package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// Dial connects to e, honouring ctx for cancellation and deadline, including
// during the TLS handshake. tlsConfig is used only for tls endpoints; nil
// means verify the server against the system roots and the endpoint's host.
// An empty tcp or ws host dials localhost. A ws or wss endpoint dials
// WebSocketPath and carries one frame per binary message.
func Dial(ctx context.Context, e Endpoint, tlsConfig *tls.Config) (net.Conn, error) {
	e, err := ParseEndpoint(e.String())
	if err != nil {
		return nil, err
	}
	// Checked up front so a cancelled ctx fails the same way on every path,
	// even where the dial itself would have succeeded at once.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", e, err)
	}
	var c net.Conn
	switch e.Scheme {
	case SchemeUnix:
		var d net.Dialer
		if c, err = d.DialContext(ctx, "unix", e.Address); err == nil {
			_ = c.(*net.UnixConn).SetWriteBuffer(UnixSendBuffer)
		}
	case SchemeWS, SchemeWSS:
		c, err = dialWebSocket(ctx, e, tlsConfig)
	case SchemeTLS:
		d := tls.Dialer{Config: clientTLSConfig(tlsConfig, e.Address)}
		c, err = d.DialContext(ctx, "tcp", e.Address)
	default: // SchemeTCP
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", dialAddr(e.Address))
	}
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", e, err)
	}
	return c, nil
}

// dialAddr maps an empty host, which means all interfaces to Listen, to the
// local machine.
func dialAddr(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host != "" {
		return hostport
	}
	return net.JoinHostPort("localhost", port)
}

// dialWebSocket upgrades an HTTP connection to e's WebSocketPath.
func dialWebSocket(ctx context.Context, e Endpoint, tlsConfig *tls.Config) (net.Conn, error) {
	// A transport of its own: the upgraded connection is never pooled,
	// and the TLS settings are this dial's.
	tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{}).DialContext, ForceAttemptHTTP2: false}
	if e.Scheme == SchemeWSS {
		tr.TLSClientConfig = clientTLSConfig(tlsConfig, e.Address)
	}
	defer tr.CloseIdleConnections()
	u := string(e.Scheme) + "://" + dialAddr(e.Address) + WebSocketPath
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return nil, err
	}
	c := newWSConn(ws)
	c.Established() // this end chose its peer
	return c, nil
}
