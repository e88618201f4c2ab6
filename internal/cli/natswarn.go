package cli

import (
	"net"
	"net/url"
	"strings"
)

// natsExposure says, loudly, what a bus on NATS beyond loopback exposes
// when serve brings no NATS credentials or no TLS: anyone who can reach
// NATS then reads every payload and forges traffic, replicated state and
// directory entries (docs/cluster.md#trust). "" when every server is on
// loopback, or both are given.
func natsExposure(urls []string, creds, tlsCA string) string {
	var open []string
	for _, u := range urls {
		host, user := natsHost(strings.TrimSpace(u))
		if user {
			creds = "in the URL" // user and password, or a token
		}
		if !loopbackHost(host) {
			open = append(open, host)
		}
	}
	var missing []string
	if creds == "" {
		missing = append(missing, "NATS credentials (--nats-creds)")
	}
	if tlsCA == "" {
		missing = append(missing, "TLS (--nats-tls-ca)")
	}
	if len(open) == 0 || len(missing) == 0 {
		return ""
	}
	return "NATS at " + strings.Join(open, ", ") + " is not on loopback and this broker uses no " + strings.Join(missing, " and no ") +
		": anyone who can reach NATS can read every message of the bus and forge messages, replicated state and directory entries. " +
		"Give each broker a NATS user limited to its own subjects, and TLS (docs/cluster.md#trust)"
}

// natsHost is the host of a NATS URL ("nats://host:port", or
// "host:port"), and whether it carries credentials (user info).
func natsHost(u string) (host string, user bool) {
	if !strings.Contains(u, "://") {
		u = "nats://" + u
	}
	p, err := url.Parse(u)
	if err != nil {
		return u, false
	}
	return p.Hostname(), p.User != nil
}

// loopbackHost reports whether host names this machine's loopback.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
