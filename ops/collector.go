package ops

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"busbar/broker"
	"busbar/edge"
	"busbar/relay"
)

// namespace is every metric's prefix.
const namespace = "busbar"

// counter is one of the broker's monotonic counters (broker.Stats): the
// metric busbar_<name>_total and the status API's counters[<name>].
type counter struct {
	name, help string
	get        func(*broker.Stats) int64
}

var counters = []counter{
	{"messages_expired_in_queue", "Messages dropped because their deadline passed while queued.", func(s *broker.Stats) int64 { return s.ExpiredInQueue }},
	{"frames_malformed", "Frames refused as malformed.", func(s *broker.Stats) int64 { return s.Malformed }},
	{"refused", "Messages and commands refused by permissions or limits (REJECTED, AMBIGUOUS).", func(s *broker.Stats) int64 { return s.Refused }},
	{"slow_consumer_disconnects", "Connections closed because they stopped reading.", func(s *broker.Stats) int64 { return s.SlowConsumers }},
	{"write_failures", "Connections whose writes failed because the peer was gone.", func(s *broker.Stats) int64 { return s.WriteFailures }},
	{"lease_expiries", "Nodes removed because their lease expired (silence).", func(s *broker.Stats) int64 { return s.LeaseExpired }},
	{"connections_over_capacity", "Connections closed at once because MaxConnections were served.", func(s *broker.Stats) int64 { return s.OverCapacity }},
	{"handshakes_evicted", "Connections closed while logging in to make room for newer ones.", func(s *broker.Stats) int64 { return s.HandshakesEvicted }},
	{"state_writes_refused", "State writes refused: foreign writes to closed keys, opens by non-owners.", func(s *broker.Stats) int64 { return s.StateRefused }},
	{"handshakes_refused", "Connections refused while logging in: every place was held by one younger than the grace.", func(s *broker.Stats) int64 { return s.HandshakesRefused }},
	{"log_lines_suppressed", "Warnings not written because the same connection had one of the same kind within the last second.", func(s *broker.Stats) int64 { return s.LogSuppressed }},
	{"garbage_disconnects", "Connections closed after too many frames in a row that did not parse.", func(s *broker.Stats) int64 { return s.GarbageClosed }},
	{"stream_stalls", "Times a stream message waited for room in a subscriber's full queue.", func(s *broker.Stats) int64 { return s.StreamStalls }},
}

// collector reads the broker's figures at each scrape.
type collector struct {
	b *broker.Broker

	counters                                      []*prometheus.Desc
	dropped, connections, nodes, services, ready  *prometheus.Desc
	namespaces, keys, tappers, tapMissed          *prometheus.Desc
	relayInboxes, relayBlobs, relayBytes          *prometheus.Desc
	relayPushes, relayFsyncs, relayAcks           *prometheus.Desc
	relayExpired, relayDamaged, relayRefused      *prometheus.Desc
	relaySegments, relayDiskBytes, relayLiveBytes *prometheus.Desc
	groupRequests                                 *prometheus.Desc
	acceptFailures, refusalLines                  *prometheus.Desc
	doorClosed, doorExpired                       *prometheus.Desc
	traffic                                       trafficDescs
}

func newCollector(b *broker.Broker) *collector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, "", n) }
	desc := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name(n), help, labels, nil)
	}
	c := &collector{b: b,
		dropped:        desc("dropped_total", "Messages discarded with nobody told, by reason (broker.DropReason).", "reason"),
		connections:    desc("connections", "Connections being served, logging in or registered."),
		nodes:          desc("nodes", "Nodes registered at this broker."),
		services:       desc("services", "Service instances in the registry (all brokers of a bus)."),
		ready:          desc("ready", "1 while the broker takes new work (0 once it is shutting down); /readyz also probes the data directory."),
		namespaces:     desc("state_namespaces", "State namespaces held."),
		tappers:        desc("tappers", "Connections running busbar tap."),
		tapMissed:      desc("tap_missed_total", "Tap copies lost because a tapper's queue was full."),
		keys:           desc("state_keys", "Keys in all state namespaces."),
		relayInboxes:   desc("relay_inboxes", "Devices whose durable inbox holds a blob."),
		relayBlobs:     desc("relay_blobs", "Blobs in all durable inboxes."),
		relayBytes:     desc("relay_blob_bytes", "Bytes of the blobs in all durable inboxes."),
		relayPushes:    desc("relay_pushes_total", "Durable pushes committed (synced)."),
		relayFsyncs:    desc("relay_fsyncs_total", "Group commits synced by the relay store; pushes_total / fsyncs_total is the batch size."),
		relayAcks:      desc("relay_acks_total", "Durable blobs deleted by an acknowledgement."),
		relayExpired:   desc("relay_expired_total", "Durable blobs deleted past their TTL."),
		relayDamaged:   desc("relay_damaged_total", "Durable blobs dropped because their record failed its check."),
		relayRefused:   desc("relay_refused_total", "Durable pushes refused, by code.", "code"),
		relaySegments:  desc("relay_segments", "Segment files of the relay's log."),
		relayDiskBytes: desc("relay_disk_bytes", "Bytes of the relay's segment files."),
		relayLiveBytes: desc("relay_live_bytes", "Bytes of the relay's records still needed."),
		acceptFailures: desc("accept_failures_total", "Temporary accept failures (out of file descriptors, a peer gone before its accept) retried after a pause, by door.", "door"),
		refusalLines:   desc("refusal_log_lines_total", "Refusal warnings of every door, by outcome: written, or not_logged past the refusal log's rate (edge.RefusalLog).", "outcome"),
		doorClosed:     desc("door_closed_total", "Connections a door ended on a deadline, by door (bus, moonbridge, trueseal, cosmix) and reason (login_timeout: no proof of identity in time; idle: a session that did nothing in time).", "door", "reason"),
		doorExpired:    desc("door_frames_expired_total", "Frames a door's writer dropped, never written, because their deadline passed while they waited, by door.", "door"),
		groupRequests:  desc("group_requests_total", "Requests this broker sent to each live member of a service group through the service's bare name.", "service", "group", "node"),
	}
	for _, k := range counters {
		c.counters = append(c.counters, desc(k.name+"_total", k.help))
	}
	c.traffic = newTrafficDescs(desc)
	return c
}

func (c *collector) all() []*prometheus.Desc {
	return slices.Concat([]*prometheus.Desc{c.dropped, c.connections, c.nodes, c.services, c.ready, c.namespaces, c.keys, c.tappers, c.tapMissed,
		c.relayInboxes, c.relayBlobs, c.relayBytes, c.relayPushes, c.relayFsyncs, c.relayAcks, c.relayExpired,
		c.relayDamaged, c.relayRefused, c.relaySegments, c.relayDiskBytes, c.relayLiveBytes, c.groupRequests, c.acceptFailures, c.refusalLines, c.doorClosed, c.doorExpired}, c.counters, c.traffic.all())
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.all() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	st := c.b.Stats()
	for i, k := range counters {
		count(c.counters[i], float64(k.get(&st)))
	}
	for _, r := range broker.DropReasons() {
		count(c.dropped, float64(st.Drops[r]), r.String())
	}
	for door, n := range edge.AcceptFailures() {
		count(c.acceptFailures, float64(n), door)
	}
	for dr, n := range edge.Closed() {
		count(c.doorClosed, float64(n), dr.Door, dr.Reason)
	}
	for door, n := range edge.Expired() {
		count(c.doorExpired, float64(n), door)
	}
	written, notLogged := c.b.Refusals().Counts()
	count(c.refusalLines, float64(written), "written")
	count(c.refusalLines, float64(notLogged), "not_logged")
	gauge(c.connections, float64(c.b.Connections()))
	gauge(c.nodes, float64(st.Nodes))
	gauge(c.services, float64(len(c.b.Services())))
	ready := 1.0
	if c.b.Ready() != nil {
		ready = 0
	}
	gauge(c.ready, ready)
	spaces := c.b.Namespaces()
	keys := 0
	for _, n := range spaces {
		keys += n.Keys
	}
	gauge(c.namespaces, float64(len(spaces)))
	gauge(c.keys, float64(keys))
	gauge(c.tappers, float64(c.b.Tappers()))
	count(c.tapMissed, float64(c.b.TapMissed()))
	for _, g := range c.b.GroupRequests() {
		count(c.groupRequests, float64(g.Requests), g.Service, g.Group, g.Node)
	}
	t := c.b.Traffic()
	c.traffic.collect(ch, &t, gauge, count)
	if rs, ok := c.b.RelayStats(); ok {
		c.collectRelay(&rs, gauge, count)
		c.traffic.collectRelay(ch, &t)
	}
}

func (c *collector) collectRelay(rs *relay.Stats, gauge, count func(*prometheus.Desc, float64, ...string)) {
	gauge(c.relayInboxes, float64(rs.Inboxes))
	gauge(c.relayBlobs, float64(rs.Blobs))
	gauge(c.relayBytes, float64(rs.Bytes))
	count(c.relayPushes, float64(rs.Pushes))
	count(c.relayFsyncs, float64(rs.Fsyncs))
	count(c.relayAcks, float64(rs.Acks))
	count(c.relayExpired, float64(rs.Expired))
	count(c.relayDamaged, float64(rs.Damaged))
	for code := relay.TooLarge; code <= relay.Internal; code++ {
		count(c.relayRefused, float64(rs.Refused[code]), codeLabel(code))
	}
	gauge(c.relaySegments, float64(rs.Segments))
	gauge(c.relayDiskBytes, float64(rs.DiskBytes))
	gauge(c.relayLiveBytes, float64(rs.LiveBytes))
}

// codeLabel is a relay refusal's name as a label value ("inbox_full").
func codeLabel(c relay.Code) string { return strings.ReplaceAll(c.String(), " ", "_") }
