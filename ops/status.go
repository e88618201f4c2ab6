package ops

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"busbar/broker"
	"busbar/edge/trueseal"
	"busbar/relay"
	"busbar/wire"
)

// Status is the JSON of StatusPath: the bus as this broker sees it.
type Status struct {
	Broker string `json:"broker"` // the broker's node name
	// Version is the broker binary's version (Options.Version); absent
	// when it was not given.
	Version string `json:"version,omitempty"`
	// Protocol is the version of the bus protocol the broker speaks.
	Protocol string `json:"protocol"`
	// UptimeSeconds is how long the broker has run.
	UptimeSeconds float64 `json:"uptime_seconds"`
	Ready         bool    `json:"ready"`
	// NotReady says why the broker is not ready; empty when it is.
	NotReady    string `json:"not_ready,omitempty"`
	Connections int    `json:"connections"`
	// Nodes are what `busbar ls --json` prints: every node of the bus.
	Nodes []wire.NodeInfo `json:"nodes"`
	// Services are what `busbar ls --services --json` prints.
	Services []wire.ServiceInfo `json:"services"`
	// Groups are the service groups among Services, each with its
	// members (docs/discovery.md#service-groups).
	Groups     []GroupStatus          `json:"groups"`
	Namespaces []broker.NamespaceInfo `json:"namespaces"`
	// Counters are the broker's counters by metric name, less the
	// busbar_ prefix and _total suffix (docs/operations.md#metrics).
	Counters map[string]int64 `json:"counters"`
	// Dropped counts discarded messages by reason.
	Dropped map[string]int64 `json:"dropped"`
	// Relay is the durable relay store's figures; absent when this broker
	// is not a relay.
	Relay *relay.Stats `json:"relay,omitempty"`
	// RelayProtocols splits the relay's inboxes by the protocol that owns
	// them: "busbar" (busbar's own durable delivery) and "trueseal"
	// (serve --trueseal); absent when the broker is not a relay.
	RelayProtocols map[string]ProtocolInboxes `json:"relay_protocols,omitempty"`
	// Traffic is the per-message metrics (docs/operations.md#the-status-api).
	Traffic TrafficStatus `json:"traffic"`
}

// GroupStatus is a service group: the live instances of a service that
// declare one group, sharing the requests to its bare name.
type GroupStatus struct {
	Service string              `json:"service"`
	Group   string              `json:"group"`
	Members []GroupMemberStatus `json:"members"` // sorted by node
}

// GroupMemberStatus is a member of a service group, with the requests
// this broker sent it through the group: busbar_group_requests_total
// (broker.GroupRequests). A broker counts only what it sent; each broker
// of a bus has its own count.
type GroupMemberStatus struct {
	Node     string `json:"node"`
	Broker   string `json:"broker,omitempty"` // on a bus, the broker it is connected to
	Requests int64  `json:"requests"`
}

// groups gathers the service groups of services (sorted by service and
// node, as Broker.Services returns them) with the requests sent.
func groups(services []wire.ServiceInfo, sent []broker.GroupRequests) []GroupStatus {
	requests := map[broker.GroupMember]int64{}
	for _, g := range sent {
		requests[g.GroupMember] = g.Requests
	}
	out := []GroupStatus{}
	for _, s := range services {
		if s.Group == "" {
			continue
		}
		i := slices.IndexFunc(out, func(g GroupStatus) bool { return g.Service == s.Service && g.Group == s.Group })
		if i < 0 {
			out = append(out, GroupStatus{Service: s.Service, Group: s.Group})
			i = len(out) - 1
		}
		out[i].Members = append(out[i].Members, GroupMemberStatus{Node: s.Provenance.Node, Broker: s.Provenance.Broker,
			Requests: requests[broker.GroupMember{Service: s.Service, Group: s.Group, Node: s.Provenance.Node}]})
	}
	for _, g := range out {
		slices.SortFunc(g.Members, func(a, b GroupMemberStatus) int { return strings.Compare(a.Node, b.Node) })
	}
	return out
}

// ProtocolInboxes are one protocol's durable inboxes: those holding a
// blob, their blobs and bytes. Counts only: no key, no device id.
type ProtocolInboxes struct {
	Inboxes int   `json:"inboxes"`
	Blobs   int   `json:"blobs"`
	Bytes   int64 `json:"bytes"`
}

// TrafficStatus is the per-message metrics in the status: what the
// metrics of the same names say, by label value.
type TrafficStatus struct {
	In  map[string]broker.Tally `json:"in"`  // busbar_messages_in_total, busbar_bytes_in_total by kind
	Out map[string]broker.Tally `json:"out"` // busbar_messages_out_total, busbar_bytes_out_total by kind
	// Receipts, RequestErrors and HandshakeFailures count by result.
	Receipts          map[string]int64 `json:"receipts"`
	RequestErrors     map[string]int64 `json:"request_errors"`
	HandshakeFailures map[string]int64 `json:"handshake_failures"`
	StateWrites       int64            `json:"state_writes"`
	Queued            int64            `json:"queued_messages"`
	QueuedBytes       int64            `json:"queued_bytes"`
	QueueMax          int64            `json:"queue_messages_max"`
	QueueBytesMax     int64            `json:"queue_bytes_max"`
	// Routing and RoundTrip are the sampled latency histograms: Bounds
	// are the buckets' upper bounds in seconds, Counts the observations
	// in each (not cumulative; one more for above the last bound).
	Routing   Latency `json:"routing"`
	RoundTrip Latency `json:"round_trip"`
	// Channels counts the messages routed per channel, exactly
	// (broker.Traffic's Channels).
	Channels map[string]int64 `json:"channels"`
	// RelayInbox and RelayBatch are the relay histograms (blobs in an
	// inbox after a push, pushes per fsync); absent when not a relay.
	RelayInbox *broker.HistogramSnapshot `json:"relay_inbox,omitempty"`
	RelayBatch *broker.HistogramSnapshot `json:"relay_batch,omitempty"`
}

// Latency is a histogram in the status.
type Latency struct {
	Bounds     []float64 `json:"bounds"`
	Counts     []int64   `json:"counts"`
	Count      int64     `json:"count"`
	SumSeconds float64   `json:"sum_seconds"`
}

func latency(h broker.HistogramSnapshot) Latency {
	l := Latency{Counts: h.Counts, Count: h.Count, SumSeconds: float64(h.Sum) / 1e9}
	for _, b := range h.Bounds {
		l.Bounds = append(l.Bounds, float64(b)/1e9)
	}
	return l
}

func trafficStatus(t *broker.Traffic) TrafficStatus {
	s := TrafficStatus{In: map[string]broker.Tally{}, Out: map[string]broker.Tally{},
		Receipts: t.Receipts, RequestErrors: t.RequestErrors, HandshakeFailures: t.HandshakeFailures,
		StateWrites: t.StateWrites, Queued: t.Queued, QueuedBytes: t.QueuedBytes, QueueMax: t.MaxQueued, QueueBytesMax: t.MaxQueuedBytes,
		Routing: latency(t.Routing), RoundTrip: latency(t.RoundTrip), Channels: map[string]int64{}}
	for _, k := range broker.MsgKinds() {
		s.In[k.String()], s.Out[k.String()] = t.In[k], t.Sent(k)
	}
	maps.Copy(s.Channels, t.Channels)
	return s
}

// ReadStatus returns the broker's status.
func (o Options) ReadStatus() Status { return o.readStatus(o.notReady()) }

// readStatus is the status with notReady, the readiness as last probed.
func (o Options) readStatus(notReady error) Status {
	b := o.Broker
	st := b.Stats()
	s := Status{Broker: b.Name(), Version: o.Version, Protocol: wire.ProtocolVersion, UptimeSeconds: b.Uptime().Seconds(), Ready: true, Connections: b.Connections(), Nodes: b.Directory(), Services: b.Services(),
		Namespaces: b.Namespaces(), Counters: map[string]int64{}, Dropped: map[string]int64{}}
	s.Groups = groups(s.Services, b.GroupRequests())
	if notReady != nil {
		s.Ready, s.NotReady = false, notReady.Error()
	}
	for _, k := range counters {
		s.Counters[k.name] = k.get(&st)
	}
	for _, r := range broker.DropReasons() {
		s.Dropped[r.String()] = st.Drops[r]
	}
	if rs, ok := b.RelayStats(); ok {
		s.Relay = &rs
		if st := b.RelayStore(); st != nil {
			n, in := st.Prefix(trueseal.DevicePrefix)
			s.RelayProtocols = map[string]ProtocolInboxes{
				"trueseal": {Inboxes: n, Blobs: in.Blobs, Bytes: in.Bytes},
				"busbar":   {Inboxes: rs.Inboxes - n, Blobs: rs.Blobs - in.Blobs, Bytes: rs.Bytes - in.Bytes},
			}
		}
	}
	t := b.Traffic()
	s.Traffic = trafficStatus(&t)
	if s.Relay != nil {
		s.Traffic.RelayInbox, s.Traffic.RelayBatch = &t.RelayInbox, &t.RelayBatch
	}
	return s
}

func (o Options) status(w http.ResponseWriter, _ *http.Request) { writeJSON(w, o.ReadStatus()) }
