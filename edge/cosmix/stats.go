package cosmix

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// The doors of a Server, as its log, Stats and the metrics name them.
const (
	// DoorTCP is the loopback WebSocket listener (Serve, serve's
	// --cosmix).
	DoorTCP = "cosmix"
	// DoorUnix is the native Unix socket (ServeUnix, serve's
	// --cosmix-socket).
	DoorUnix = "cosmix-socket"
)

// The reasons a peer's connection or message is refused, as Stats and
// the metrics count them (by door) and the refusal log names them
// (edge.RefusalLog: a few lines a second per reason, the rest counted).
const (
	// RefusedForeignPeer: a connection on the Unix socket from another
	// OS user (or whose peer credentials could not be read), closed
	// before a byte is read.
	RefusedForeignPeer = "foreign_peer"
	// RefusedOrigin: a browser page that is not a loopback one; 403.
	RefusedOrigin = "origin"
	// RefusedOverCapacity: Config.MaxConns connections served already;
	// 503.
	RefusedOverCapacity = "over_capacity"
	// RefusedBadToken: no credential, or one the broker does not log in;
	// 401.
	RefusedBadToken = "bad_token"
	// RefusedLogin: the broker did not log the connection in within
	// Config.LoginTimeout (or is closing); 503.
	RefusedLogin = "login_failed"
	// RefusedForbidden: the principal may not take calls on CallChannel
	// (or a native principal would be over MaxPrincipalBytes); 403.
	RefusedForbidden = "forbidden"
	// RefusedBadUpgrade: a request to Path that is not a WebSocket
	// upgrade; answered by the WebSocket library (426 or 400).
	RefusedBadUpgrade = "bad_upgrade"
	// RefusedNoFirstFrame: an upgraded connection that sent no whole
	// message within Config.FirstFrameTimeout; closed.
	RefusedNoFirstFrame = "no_first_frame"
	// RefusedMalformedFrame: a text message that is not a cosmix frame;
	// answered rc 10, the connection kept (noded's rule).
	RefusedMalformedFrame = "malformed_frame"
	// RefusedBinary: a binary message on the native socket; the
	// connection is closed with status 1003.
	RefusedBinary = "binary_message"
	// RefusedTooBig: a message over MaxMessageBytes; the connection is
	// closed with status 1009.
	RefusedTooBig = "message_too_big"
)

// refusalText is the refusal log's line for each reason.
var refusalText = map[string]string{
	RefusedForeignPeer:    "cosmix: refused a connection on the Unix socket: not the broker's OS user",
	RefusedOrigin:         "cosmix: refused an upgrade from a page that is not a loopback one",
	RefusedOverCapacity:   "cosmix: refused an upgrade: MaxConns connections served",
	RefusedBadToken:       "cosmix: refused an upgrade: no credential, or one that does not log in",
	RefusedLogin:          "cosmix: refused an upgrade: the broker did not log it in",
	RefusedForbidden:      "cosmix: refused an upgrade: the principal may not take calls",
	RefusedBadUpgrade:     "cosmix: refused a request that is not a WebSocket upgrade",
	RefusedNoFirstFrame:   "cosmix: closed a connection that sent no frame within FirstFrameTimeout",
	RefusedMalformedFrame: "cosmix: a message that is not a frame (answered rc 10)",
	RefusedBinary:         "cosmix: closed a native connection that sent a binary message",
	RefusedTooBig:         "cosmix: closed a connection whose message is over MaxMessageBytes",
}

// Refusal is a door and a reason, the key of Stats.Refused.
type Refusal struct {
	Door, Reason string
}

// Stats are a Server's counts, for the metrics (NewCollector).
type Stats struct {
	// Sessions are the upgraded connections open now, by door.
	Sessions map[string]int
	// Dropped is Server.Dropped.
	Dropped uint64
	// Refused counts what peers had refused, by door and reason (the
	// Refused constants).
	Refused map[Refusal]uint64
}

// refuse writes a refusal of reason at door to the shared refusal log,
// under the peer's source host ("" for a local peer), then counts it: a
// refusal counted is one the log has had.
func (s *Server) refuse(door, reason, host string, args ...any) {
	s.cfg.Door.Refusals.Warn(refusalText[reason], host, append(args, "door", door, "reason", reason)...)
	s.refused.Add(Refusal{Door: door, Reason: reason}, 1)
}

// sourceHost is the host a refusal from remote (a request's RemoteAddr)
// is logged under.
func sourceHost(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Stats returns the server's counts.
func (s *Server) Stats() Stats {
	st := Stats{Sessions: map[string]int{}, Dropped: s.dropped.Load(), Refused: s.refused.Read()}
	s.mu.Lock()
	for sess := range s.sessions {
		st.Sessions[sess.door]++
	}
	s.mu.Unlock()
	return st
}

// Collector exports a Server's Stats to Prometheus.
type Collector struct {
	s                          *Server
	sessions, dropped, refused *prometheus.Desc
}

// NewCollector returns the collector of s.
func NewCollector(s *Server) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("busbar", "", name), help, labels, nil)
	}
	return &Collector{s: s,
		sessions: d("cosmix_sessions", "cosmix connections upgraded and open, by door (cosmix: --cosmix, cosmix-socket: --cosmix-socket).", "door"),
		dropped:  d("cosmix_dropped_total", "Frames for cosmix apps dropped because the app's queue was full."),
		refused:  d("cosmix_refused_total", "cosmix connections and messages refused, by door and reason (docs/cosmix.md#refusals).", "door", "reason"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sessions
	ch <- c.dropped
	ch <- c.refused
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, door := range []string{DoorTCP, DoorUnix} {
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(st.Sessions[door]), door)
	}
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped))
	for k, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), k.Door, k.Reason)
	}
}
