package trueseal

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the trueseal relay's figures to Prometheus: its
// sessions and frames, and the relay store's inboxes labelled by the
// protocol that owns them (protocol="trueseal" for this package's
// inboxes, "busbar" for the rest). No key, address or content: counts.
type Collector struct {
	s                                  *Server
	inboxes, blobs, bytes              *prometheus.Desc
	sessions, pushes, delivered, dacks *prometheus.Desc
	handshakesFailed, sessionsRefused  *prometheus.Desc
	handshakes, sessionsClosed         *prometheus.Desc
	sourceRateLimited                  *prometheus.Desc
	sourceSessionsRefused              *prometheus.Desc
}

// NewCollector returns the collector of s.
func NewCollector(s *Server) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("busbar", "", name), help, labels, nil)
	}
	return &Collector{s: s,
		inboxes:          d("relay_protocol_inboxes", "Durable inboxes holding a blob, by the protocol that owns them.", "protocol"),
		blobs:            d("relay_protocol_blobs", "Blobs in durable inboxes, by protocol.", "protocol"),
		bytes:            d("relay_protocol_blob_bytes", "Bytes of the blobs in durable inboxes, by protocol.", "protocol"),
		sessions:         d("trueseal_sessions", "trueseal sessions open, by kind (push: Noise NK, receive: Noise XX).", "kind"),
		pushes:           d("trueseal_pushes_total", "trueseal pushes answered: acked (on disk) or refused (Error, or the session closed for a temporary refusal).", "result"),
		delivered:        d("trueseal_delivered_total", "Deliver frames written to trueseal receive sessions."),
		dacks:            d("trueseal_deliver_acks_total", "trueseal DeliverAcks that deleted a blob (of an inbox on another broker of the bus: forwarded to its home)."),
		handshakesFailed: d("trueseal_handshakes_failed_total", "trueseal connections whose Noise handshake failed or timed out."),
		sessionsRefused:  d("trueseal_sessions_refused_total", "trueseal connections closed at the end of their handshake: MaxSessions reached, every session in use."),
		handshakes:       d("trueseal_handshakes", "trueseal connections in their Noise handshake now, each holding a place in the shared pre-login admission."),
		sessionsClosed: d("trueseal_sessions_closed_total", "trueseal sessions the relay closed, by reason: unused (nothing pushed or received within FirstFrameTimeout of the handshake), "+
			"evicted (an unused one closed to make room at MaxSessions), idle (nothing read for IdleTimeout).", "reason"),
		sourceRateLimited:     d("trueseal_source_rate_limited_total", "trueseal pushes refused for now because their source address was over its push rate (SourcePushRate)."),
		sourceSessionsRefused: d("trueseal_source_sessions_refused_total", "trueseal receive sessions closed at the end of their handshake because their source address held its share (MaxReceivePerSource)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inboxes, c.blobs, c.bytes, c.sessions, c.pushes, c.delivered, c.dacks, c.handshakesFailed, c.sessionsRefused, c.handshakes, c.sessionsClosed, c.sourceRateLimited, c.sourceSessionsRefused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if store := c.s.opts.Store; store != nil { // the inboxes kept here (on a bus, those homed here)
		all := store.Stats()
		n, in := store.Prefix(DevicePrefix)
		gauge(c.inboxes, float64(n), "trueseal")
		gauge(c.blobs, float64(in.Blobs), "trueseal")
		gauge(c.bytes, float64(in.Bytes), "trueseal")
		gauge(c.inboxes, float64(all.Inboxes-n), "busbar")
		gauge(c.blobs, float64(all.Blobs-in.Blobs), "busbar")
		gauge(c.bytes, float64(all.Bytes-in.Bytes), "busbar")
	}
	st := c.s.Stats()
	gauge(c.sessions, float64(st.PushSessions), "push")
	gauge(c.sessions, float64(st.ReceiveSessions), "receive")
	count(c.pushes, float64(st.Pushed), "acked")
	count(c.pushes, float64(st.Refused), "refused")
	count(c.delivered, float64(st.Delivered))
	count(c.dacks, float64(st.DeliverAcks))
	count(c.handshakesFailed, float64(st.HandshakeFailed))
	count(c.sessionsRefused, float64(st.SessionsRefused))
	gauge(c.handshakes, float64(st.Handshakes))
	count(c.sessionsClosed, float64(st.Unused), "unused")
	count(c.sessionsClosed, float64(st.Evicted), "evicted")
	count(c.sessionsClosed, float64(st.Idle), "idle")
	count(c.sourceRateLimited, float64(st.SourceRateLimited))
	count(c.sourceSessionsRefused, float64(st.SourceSessionsRefused))
}
