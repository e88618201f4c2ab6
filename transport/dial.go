package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
)

// Dial connects to e, honouring ctx for cancellation and deadline, including
// during the TLS handshake. tlsConfig is used only for tls endpoints; nil
// means verify the server against the system roots and the endpoint's host.
// An empty tcp host dials localhost.
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
		c, err = d.DialContext(ctx, "unix", e.Address)
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
