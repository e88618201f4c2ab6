package transport

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Scheme names how an endpoint is reached.
type Scheme string

// The supported schemes.
const (
	SchemeUnix Scheme = "unix" // unix:///absolute/path/to/socket
	SchemeTCP  Scheme = "tcp"  // tcp://host:port
	SchemeTLS  Scheme = "tls"  // tls://host:port
	SchemeWS   Scheme = "ws"   // ws://host:port[/bus], a broker's HTTP listener
	SchemeWSS  Scheme = "wss"  // wss://host:port[/bus], over TLS
)

// MaxUnixPathLen is the longest unix socket path accepted, in bytes. Linux's
// sockaddr_un.sun_path holds 108 bytes; Go needs one for the terminating NUL.
const MaxUnixPathLen = 107

// ErrBadEndpoint is wrapped by every error ParseEndpoint returns, and by
// Listen and Dial when given an invalid Endpoint.
var ErrBadEndpoint = errors.New("transport: invalid endpoint")

// Endpoint is a parsed broker address.
type Endpoint struct {
	Scheme  Scheme
	Address string // socket path for unix, host:port for tcp/tls
}

// String returns the canonical URL form, which ParseEndpoint maps back to e.
func (e Endpoint) String() string {
	return string(e.Scheme) + "://" + e.Address
}

// ParseEndpoint parses a broker address; the package documentation lists the
// accepted forms.
func ParseEndpoint(s string) (Endpoint, error) {
	bad := func(why string) (Endpoint, error) {
		return Endpoint{}, fmt.Errorf("%w %q: %s", ErrBadEndpoint, s, why)
	}
	if s == "" {
		return bad("empty")
	}
	scheme, rest, hasScheme := strings.Cut(s, "://")
	switch {
	case strings.HasPrefix(s, "/"):
		// Checked first: a bare path may itself contain "://".
		scheme, rest = string(SchemeUnix), s
	case hasScheme: // scheme and rest are already split
	case strings.Contains(s, "/") && !strings.Contains(s, ":"):
		return bad("socket path must be absolute")
	default:
		scheme, rest = string(SchemeTCP), s
		// "tls:host:4222" or "unix:/x" would otherwise parse as a plain tcp
		// host:port and quietly drop the intended scheme.
		if before, _, ok := strings.Cut(s, ":"); ok {
			switch Scheme(strings.ToLower(before)) {
			case SchemeUnix, SchemeTCP, SchemeTLS, SchemeWS, SchemeWSS:
				return bad(`missing "//" after scheme`)
			}
		}
	}
	var why string
	var e Endpoint
	switch Scheme(strings.ToLower(scheme)) {
	case SchemeUnix:
		e, why = parseUnix(rest)
	case SchemeTCP:
		e, why = parseHostPort(SchemeTCP, rest)
	case SchemeTLS:
		e, why = parseHostPort(SchemeTLS, rest)
	case SchemeWS, SchemeWSS:
		// The path is the broker's; writing it out is allowed, not needed.
		e, why = parseHostPort(Scheme(strings.ToLower(scheme)), strings.TrimSuffix(rest, WebSocketPath))
	case "":
		why = "missing scheme"
	default:
		why = fmt.Sprintf("unknown scheme %q (want unix, tcp, tls, ws or wss)", scheme)
	}
	if why != "" {
		return bad(why)
	}
	return e, nil
}

// parseUnix parses the socket path, what follows "unix://".
func parseUnix(path string) (Endpoint, string) {
	switch {
	case path == "":
		return Endpoint{}, "empty socket path"
	case !strings.HasPrefix(path, "/"):
		// Also catches "unix://host/path": unix endpoints have no host.
		return Endpoint{}, "socket path must be absolute (unix:///abs/path, three slashes)"
	}
	if why := refuseURLParts(path); why != "" {
		return Endpoint{}, why
	}
	if strings.IndexByte(path, 0) >= 0 {
		return Endpoint{}, "NUL byte in socket path"
	}
	if len(path) > MaxUnixPathLen {
		return Endpoint{}, fmt.Sprintf("socket path is %d bytes, over the limit of %d", len(path), MaxUnixPathLen)
	}
	return Endpoint{Scheme: SchemeUnix, Address: path}, ""
}

// parseHostPort parses the host:port of a tcp or tls endpoint and
// canonicalises it (bracketed IPv6, port without leading zeros) so that
// String round-trips.
func parseHostPort(scheme Scheme, hostport string) (Endpoint, string) {
	if why := refuseURLParts(hostport); why != "" {
		return Endpoint{}, why
	}
	if strings.Contains(hostport, "@") {
		return Endpoint{}, "userinfo is not allowed"
	}
	if strings.Contains(hostport, "/") {
		return Endpoint{}, "a path is not allowed after host:port"
	}
	if hostport == "" {
		return Endpoint{}, "missing host:port"
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) && ae.Err == "missing port in address" {
			return Endpoint{}, "missing port"
		}
		return Endpoint{}, "not host:port: " + err.Error()
	}
	if host == "" && (scheme == SchemeTLS || scheme == SchemeWSS) {
		return Endpoint{}, "tls needs a host name to verify the certificate against"
	}
	for _, c := range host {
		// Letters, digits and the punctuation of DNS names, IPv6 literals
		// and zones; anything else is a typo or an injection attempt.
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._:%", c)) {
			return Endpoint{}, fmt.Sprintf("invalid character %q in host", c)
		}
	}
	if port == "" {
		return Endpoint{}, "missing port"
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return Endpoint{}, fmt.Sprintf("port %q is not a number", port)
		}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Endpoint{}, fmt.Sprintf("port %s is out of range 0-65535", port)
	}
	return Endpoint{Scheme: scheme, Address: net.JoinHostPort(host, strconv.FormatUint(n, 10))}, ""
}

// refuseURLParts refuses the URL parts an endpoint has no use for; ignoring
// them would hide a mistake.
func refuseURLParts(s string) string {
	switch {
	case strings.Contains(s, "?"):
		return "query strings are not allowed"
	case strings.Contains(s, "#"):
		return "fragments are not allowed"
	}
	return ""
}
