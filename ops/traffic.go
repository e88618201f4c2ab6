package ops

import (
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"busbar/broker"
	"busbar/wire"
)

// The results each labelled counter always reports (at 0 until one
// happens), so a rate() starts at the first scrape; others the broker
// counts are added as they appear.
var (
	receiptResults = []wire.Result{wire.Accepted, wire.NoSubscriber, wire.NotConnected, wire.Backpressured,
		wire.Rejected, wire.TimedOut, wire.Failed}
	requestErrorResults = []wire.Result{wire.ResultNoHandler, wire.ResultOverload, wire.ResultTimeout,
		wire.ResultDisconnect, wire.ResultRejected, wire.ResultHandler, wire.ResultAmbiguous}
	handshakeResults = []wire.Result{wire.ResultAuth, wire.ResultVersion, wire.ResultMalformed, wire.ResultTooLarge,
		wire.ResultTimeout, wire.ResultDisconnect, wire.ResultOverload, wire.ResultRejected}
)

// trafficDescs are the per-message metrics' descriptions.
type trafficDescs struct {
	msgsIn, bytesIn, msgsOut, bytesOut           *prometheus.Desc
	receipts, requestErrors, handshakeFailures   *prometheus.Desc
	stateWrites                                  *prometheus.Desc
	queued, queuedBytes, queueMax, queueBytesMax *prometheus.Desc
	routing, roundTrip                           *prometheus.Desc
	relayInbox, relayBatch                       *prometheus.Desc
}

func newTrafficDescs(desc func(n, help string, labels ...string) *prometheus.Desc) trafficDescs {
	return trafficDescs{
		msgsIn:            desc("messages_in_total", "Messages nodes sent this broker, by kind.", "kind"),
		bytesIn:           desc("bytes_in_total", "Bytes of the messages nodes sent this broker, by kind.", "kind"),
		msgsOut:           desc("messages_out_total", "Messages this broker queued for nodes (once per destination), by kind.", "kind"),
		bytesOut:          desc("bytes_out_total", "Bytes of the messages this broker queued for nodes, by kind.", "kind"),
		receipts:          desc("receipts_total", "Receipts and publication results passed on or made, by result.", "result"),
		requestErrors:     desc("request_errors_total", "Failed responses requesters got, the broker's and the handlers', by result.", "result"),
		handshakeFailures: desc("handshake_failures_total", "Connections that did not log in, by the reason they were closed with.", "reason"),
		stateWrites:       desc("state_writes_total", "State writes applied at this broker."),
		queued:            desc("queued_messages", "Messages waiting in all outbound queues."),
		queuedBytes:       desc("queued_bytes", "Bytes waiting in all outbound queues."),
		queueMax:          desc("queue_messages_max", "Messages waiting in the longest outbound queue."),
		queueBytesMax:     desc("queue_bytes_max", "Bytes waiting in the fullest outbound queue."),
		routing:           desc("routing_latency_seconds", "Sampled routing latency: from the start of routing a message's read batch to its queueing for every destination."),
		roundTrip:         desc("request_round_trip_seconds", "Sampled request round trip: from the request's forwarding to its response's."),
		relayInbox:        desc("relay_inbox_blobs", "Blobs in a device's durable inbox once a push to it is stored."),
		relayBatch:        desc("relay_fsync_batch_pushes", "Durable pushes per group commit (fsync) of the relay store."),
	}
}

func (d *trafficDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.msgsIn, d.bytesIn, d.msgsOut, d.bytesOut, d.receipts, d.requestErrors, d.handshakeFailures,
		d.stateWrites, d.queued, d.queuedBytes, d.queueMax, d.queueBytesMax, d.routing, d.roundTrip, d.relayInbox, d.relayBatch}
}

// collect emits the per-message metrics of t.
func (d *trafficDescs) collect(ch chan<- prometheus.Metric, t *broker.Traffic, gauge, count func(*prometheus.Desc, float64, ...string)) {
	for _, k := range broker.MsgKinds() {
		out := t.Sent(k)
		count(d.msgsIn, float64(t.In[k].Msgs), k.String())
		count(d.bytesIn, float64(t.In[k].Bytes), k.String())
		count(d.msgsOut, float64(out.Msgs), k.String())
		count(d.bytesOut, float64(out.Bytes), k.String())
	}
	results := func(desc *prometheus.Desc, known []wire.Result, got map[string]int64) {
		for _, r := range resultLabels(known, got) {
			count(desc, float64(got[r]), label(r))
		}
	}
	results(d.receipts, receiptResults, t.Receipts)
	results(d.requestErrors, requestErrorResults, t.RequestErrors)
	results(d.handshakeFailures, handshakeResults, t.HandshakeFailures)
	count(d.stateWrites, float64(t.StateWrites))
	gauge(d.queued, float64(t.Queued))
	gauge(d.queuedBytes, float64(t.QueuedBytes))
	gauge(d.queueMax, float64(t.MaxQueued))
	gauge(d.queueBytesMax, float64(t.MaxQueuedBytes))
	ch <- histogram(d.routing, &t.Routing, 1e-9)
	ch <- histogram(d.roundTrip, &t.RoundTrip, 1e-9)
}

// collectRelay emits the relay histograms of t.
func (d *trafficDescs) collectRelay(ch chan<- prometheus.Metric, t *broker.Traffic) {
	ch <- histogram(d.relayInbox, &t.RelayInbox, 1)
	ch <- histogram(d.relayBatch, &t.RelayBatch, 1)
}

// resultLabels is known and every other result in got, sorted.
func resultLabels(known []wire.Result, got map[string]int64) []string {
	set := map[string]bool{}
	for _, r := range known {
		set[string(r)] = true
	}
	for r := range got {
		set[r] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// label is a result as a label value: NO_SUBSCRIBER → no_subscriber.
func label(r string) string { return strings.ToLower(r) }

// histogram converts a broker histogram to Prometheus's cumulative one,
// its bounds and sum multiplied by scale (1e-9: nanoseconds to seconds).
func histogram(d *prometheus.Desc, h *broker.HistogramSnapshot, scale float64) prometheus.Metric {
	buckets := map[float64]uint64{}
	var cum uint64
	for i, b := range h.Bounds {
		cum += uint64(h.Counts[i])
		buckets[float64(b)*scale] = cum
	}
	return prometheus.MustNewConstHistogram(d, uint64(h.Count), float64(h.Sum)*scale, buckets)
}
