package cli

import (
	"net/url"
	"strings"

	"busbar/transport"
)

// natsExposure says, loudly, what a bus on NATS beyond loopback exposes
// (docs/cluster.md#trust): without a bus key, whoever NATS lets publish on
// the bus's subjects forges messages, replicated state and directory
// entries; without NATS credentials or TLS, that is anyone who can reach
// NATS, who also reads every message unless the bus key seals them. ""
// when every server is on loopback, or nothing is exposed.
func natsExposure(urls []string, creds, tlsCA string, busKey, sealed bool) string {
	var open []string
	for _, u := range urls {
		host, user := natsHost(strings.TrimSpace(u))
		if user {
			creds = "in the URL" // user and password, or a token
		}
		if !transport.IsLoopbackHost(host) {
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
	strangers := len(missing) > 0
	if !busKey {
		missing = append(missing, "bus key (--nats-bus-key)")
	}
	var can []string
	if strangers && !sealed {
		can = append(can, "read every message of the bus")
	}
	if !busKey {
		can = append(can, "forge messages, replicated state and directory entries")
	}
	if len(open) == 0 || len(can) == 0 {
		return ""
	}
	who := "any NATS user allowed the bus's subjects"
	if strangers {
		who = "anyone who can reach NATS"
	}
	return "NATS at " + strings.Join(open, ", ") + " is not on loopback and this broker uses no " + strings.Join(missing, " and no ") +
		": " + who + " can " + strings.Join(can, " and ") + ". " +
		"Give each broker a NATS user limited to its own subjects, TLS, and a bus key only the brokers have (docs/cluster.md#trust)"
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
