package broker

import (
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// Per-message metrics. Counting a message must not cost the routing path
// an atomic operation per message, so each connection counts in plain
// fields owned by whoever dispatches its frames (its reader), and
// publishes them to atomics once per read batch: while the reader holds
// more frames in its buffer it sets meter.hold, and dispatch publishes only
// when it is clear. A dispatcher that never sets hold (a cluster link's
// NATS callback, a test routing as a node) publishes after every frame.
// Scrapes sum the published figures of the live connections and those of
// the retired ones (Broker.Traffic).
//
// Latencies are sampled: one routed message in SampleEvery per connection
// reads the clock once more and lands in a histogram, and so does one
// request in SampleEvery's round trip.

// SampleEvery is how often a connection's routed messages are timed for
// the routing-latency histogram, and its requests for the round-trip
// one: one in SampleEvery. A power of two. (Channels are counted
// exactly: every routed message.)
const SampleEvery = 32

// MaxChannelRates bounds the channels the broker counts apart; messages
// on channels past it are counted under OtherChannels.
const MaxChannelRates = 256

// maxConnChannels bounds the channels one connection counts apart; its
// messages on more are counted under OtherChannels.
const maxConnChannels = 64

// OtherChannels is the channel name ChannelRates counts the channels past
// MaxChannelRates under.
const OtherChannels = "(other)"

// MsgKind is what a message is, for the traffic counters.
type MsgKind uint8

// The message kinds. Traffic's arrays are indexed by them.
const (
	MsgStream    MsgKind = iota // type stream
	MsgSend                     // an event to one node
	MsgPublish                  // an event to every subscriber, with receipts
	MsgRequest                  // a request
	MsgResponse                 // a response to a request
	MsgReceipt                  // bus.receipt: a send's outcome
	MsgControl                  // any other bus.* command, and the broker's answers
	MsgHeartbeat                // an empty frame that only keeps a lease
	numMsgKinds
)

var msgKindNames = [numMsgKinds]string{
	MsgStream: "stream", MsgSend: "send", MsgPublish: "publish", MsgRequest: "request",
	MsgResponse: "response", MsgReceipt: "receipt", MsgControl: "control", MsgHeartbeat: "heartbeat",
}

// String is the kind's name, fit for a metric label.
func (k MsgKind) String() string {
	if k < numMsgKinds {
		return msgKindNames[k]
	}
	return "unknown"
}

// MsgKinds lists every kind, in order.
func MsgKinds() []MsgKind {
	ks := make([]MsgKind, numMsgKinds)
	for i := range ks {
		ks[i] = MsgKind(i)
	}
	return ks
}

// tally is a count of messages and their bytes.
type tally struct{ msgs, bytes int64 }

type atomicTally struct{ msgs, bytes atomic.Int64 }

func (a *atomicTally) add(t tally) {
	a.msgs.Add(t.msgs)
	a.bytes.Add(t.bytes)
}

// meter is one connection's traffic counters.
type meter struct {
	// Owned by the goroutine dispatching the connection's frames.
	in, out           [numMsgKinds]tally
	dirtyIn, dirtyOut uint16 // bit k: in[k] or out[k] holds counts to publish
	n                 uint32 // routed messages, for sampling
	timed             bool   // the frame being dispatched is a sampled one
	more              bool   // the last value stored in hold

	hold atomic.Bool // the reader holds more frames of this batch: publish later

	pubIn, pubOut [numMsgKinds]atomicTally
	chans         connChannels
}

// batch tells the meter whether the reader holds more frames of the batch
// being dispatched. It stores only on a change: a batch costs at most two
// stores.
func (m *meter) batch(more bool) {
	if more != m.more {
		m.more = more
		m.hold.Store(more)
	}
}

// inKind classifies a frame as dispatch routes it.
func inKind(v *hotpath.View) MsgKind {
	if v.IsHeartbeat() {
		return MsgHeartbeat
	}
	if cmd := v.Value(wire.HeaderCommand); strings.HasPrefix(cmd, wire.ControlPrefix) {
		if cmd == wire.CmdReceipt {
			return MsgReceipt
		}
		return MsgControl
	}
	switch v.Value(wire.HeaderType) {
	case wire.TypeStream:
		return MsgStream
	case wire.TypeEvent:
		if _, ok := v.Get(wire.HeaderTo); ok {
			return MsgSend
		}
		return MsgPublish
	case wire.TypeRequest:
		return MsgRequest
	case wire.TypeResponse:
		return MsgResponse
	}
	return MsgControl
}

// countIn counts a frame c sent, and decides whether it is timed.
func (c *endpoint) countIn(v *hotpath.View, n int) {
	m := &c.meter
	k := inKind(v)
	m.in[k].msgs++
	m.in[k].bytes += int64(n)
	m.dirtyIn |= 1 << k
	if k <= MsgResponse {
		m.n++
		m.timed = m.n&(SampleEvery-1) == 1
		m.chans.count(v.Value(wire.HeaderCommand), &c.b.traffic.channels)
	}
}

// countOut counts a frame of n bytes c's message put in another
// connection's queue.
func (c *endpoint) countOut(k MsgKind, n int) {
	c.meter.out[k].msgs++
	c.meter.out[k].bytes += int64(n)
	c.meter.dirtyOut |= 1 << k
}

// dispatched ends a frame's dispatch: it times a sampled one and
// publishes the counts when the reader's batch is done.
func (c *endpoint) dispatched() {
	m := &c.meter
	if m.timed {
		m.timed = false
		c.b.traffic.routing.observe(int64(time.Since(c.now())), latencyBounds)
	}
	if m.dirtyIn == 0 || m.hold.Load() {
		return
	}
	for d := m.dirtyIn; d != 0; d &= d - 1 {
		k := bits.TrailingZeros16(d)
		m.pubIn[k].add(m.in[k])
		m.in[k] = tally{}
	}
	for d := m.dirtyOut; d != 0; d &= d - 1 {
		k := bits.TrailingZeros16(d)
		m.pubOut[k].add(m.out[k])
		m.out[k] = tally{}
	}
	m.dirtyIn, m.dirtyOut = 0, 0
	m.chans.publish()
}

// requestStamp is when a sampled request was forwarded, in ns after
// b.started, for its round trip; 0 when it is not sampled.
func (c *endpoint) requestStamp() int64 {
	if !c.meter.timed {
		return 0
	}
	return max(1, int64(time.Since(c.b.started)))
}

// answered counts a response passed on to its requester: its round trip
// when the request was sampled, and its result when it is an error.
func (b *Broker) answered(cl *call, v *hotpath.View) {
	if cl.sent != 0 {
		b.traffic.rtt.observe(int64(time.Since(b.started))-cl.sent, latencyBounds)
	}
	if res, ok := v.Get(wire.HeaderResult); ok {
		b.traffic.requestErrors.add(wire.Result(res))
	}
}

// traffic is the broker's side of the meters: the retired connections'
// totals, the answers it makes itself, the results, the histograms.
type traffic struct {
	retiredIn, retiredOut [numMsgKinds]atomicTally
	answers               [numMsgKinds]atomicTally // what the broker itself queued (post)
	receipts              resultCounts
	requestErrors         resultCounts
	handshakeFailures     resultCounts
	stateWrites           atomic.Int64
	routing, rtt          histogram
	channels              channelRates
	relay                 relayMeter
}

// retire keeps a closing connection's published counts.
func (t *traffic) retire(m *meter) {
	for k := range m.pubIn {
		t.retiredIn[k].add(tally{m.pubIn[k].msgs.Load(), m.pubIn[k].bytes.Load()})
		t.retiredOut[k].add(tally{m.pubOut[k].msgs.Load(), m.pubOut[k].bytes.Load()})
	}
	m.chans.each(t.channels.add)
}

// postedKind is the kind of an answer or event the broker queues itself.
func postedKind(m *wire.Message) MsgKind {
	switch cmd := m.Value(wire.HeaderCommand); {
	case cmd == wire.CmdReceipt:
		return MsgReceipt
	case m.Value(wire.HeaderType) == wire.TypeResponse && !strings.HasPrefix(cmd, wire.ControlPrefix):
		return MsgResponse // a request's error, made by the broker
	}
	return MsgControl
}

// callMsgKinds is the kind of message each kind of call forwards.
var callMsgKinds = [...]MsgKind{callReceipt: MsgSend, callRequest: MsgRequest, callPublish: MsgPublish}

// refusal counts what answer tells a sender or requester.
func (t *traffic) refusal(k kind, r wire.Result) {
	switch k {
	case kindSend:
		t.receipts.add(receiptResult(r))
	case kindRequest:
		t.requestErrors.add(r)
	}
}

// handshakeFailed counts a connection that did not log in, by the reason
// it was closed with.
func (b *Broker) handshakeFailed(c *conn) {
	c.mu.Lock()
	r := c.reason
	c.mu.Unlock()
	b.traffic.handshakeFailures.add(r)
	b.events.add(Event{Kind: EventHandshake, Subject: remote(c.nc), Text: string(r)})
}

// resultCounts counts outcomes by wire.Result. Its counts are pointers:
// assigning to an existing string key stores the new key, and a result
// read from a frame aliases the read buffer; a lookup keeps the clone.
type resultCounts struct {
	mu sync.Mutex
	n  map[wire.Result]*int64
}

// maxResults bounds the distinct results counted: they come from the
// broker's own constants, but a bound keeps a bug from growing the map.
const maxResults = 64

func (r *resultCounts) add(res wire.Result) {
	if res == "" {
		res = wire.Failed
	}
	r.mu.Lock()
	if r.n == nil {
		r.n = map[wire.Result]*int64{}
	}
	if p, ok := r.n[res]; ok {
		*p++
	} else if len(r.n) < maxResults {
		r.n[wire.Result(strings.Clone(string(res)))] = new(int64(1))
	}
	r.mu.Unlock()
}

func (r *resultCounts) snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.n))
	for k, p := range r.n {
		out[string(k)] = *p
	}
	return out
}

// channelRates is the retired connections' messages per channel, and
// the names admitted to be counted apart: the first MaxChannelRates
// valid channel names any connection counts, for the broker's life
// (first come, so a scrape never trades one channel's row for another's);
// the rest are counted under OtherChannels.
type channelRates struct {
	mu       sync.Mutex
	n        map[string]int64
	admitted map[string]bool
}

func (r *channelRates) add(ch string, n int64) {
	r.mu.Lock()
	if r.n == nil {
		r.n = map[string]int64{}
	}
	r.n[ch] += n
	r.mu.Unlock()
}

// admit reports whether ch is counted apart: admitted before, or now,
// while fewer than MaxChannelRates are.
func (r *channelRates) admit(ch string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.admitted[ch] {
		return true
	}
	if len(r.admitted) >= MaxChannelRates {
		return false
	}
	if r.admitted == nil {
		r.admitted = map[string]bool{}
	}
	r.admitted[ch] = true
	return true
}

// connChannels counts one connection's routed messages by channel,
// exactly. Its reader counts in plain fields (a run on one channel costs
// a comparison and an increment, a new channel a map lookup) and
// publishes them to atomics at the end of each read batch, as the
// meter does its counts; Traffic and retire read the published ones
// under mu, which the reader takes only to add a channel to the map.
type connChannels struct {
	mu    sync.Mutex
	n     map[string]*chanCount // by name: at most maxConnChannels and OtherChannels
	last  *chanCount            // the last counted; reader-owned
	dirty []*chanCount          // counted since the last publish; reader-owned
}

type chanCount struct {
	name string // a clone: the channel of a frame aliases its read buffer
	n    int64  // counted, not yet published; reader-owned
	pub  atomic.Int64
}

// count counts a message on ch; admit decides which names the broker
// counts apart.
func (cc *connChannels) count(ch string, admit *channelRates) {
	p := cc.last
	if p == nil || p.name != ch {
		if p = cc.n[ch]; p == nil {
			p = cc.insert(ch, admit)
		}
		cc.last = p
	}
	if p.n == 0 {
		cc.dirty = append(cc.dirty, p)
	}
	p.n++
}

// insert adds ch's counter, or returns OtherChannels' for a name that is
// not a valid channel (the frame is refused after it is counted: its
// name must not be kept), once the connection counts maxConnChannels
// channels, or once the broker does MaxChannelRates.
func (cc *connChannels) insert(ch string, admit *channelRates) *chanCount {
	name := OtherChannels
	if len(cc.n)-btoi(cc.n[OtherChannels] != nil) < maxConnChannels && auth.ValidChannel(ch) == nil {
		if c := strings.Clone(ch); admit.admit(c) {
			name = c
		}
	}
	if p := cc.n[name]; p != nil {
		return p
	}
	p := &chanCount{name: name}
	cc.mu.Lock()
	if cc.n == nil {
		cc.n = make(map[string]*chanCount)
	}
	cc.n[name] = p
	cc.mu.Unlock()
	return p
}

// publish makes the counts since the last publish readable.
func (cc *connChannels) publish() {
	for _, p := range cc.dirty {
		p.pub.Add(p.n)
		p.n = 0
	}
	clear(cc.dirty)
	cc.dirty = cc.dirty[:0]
}

// each calls f with every channel's published count.
func (cc *connChannels) each(f func(ch string, n int64)) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for name, p := range cc.n {
		f(name, p.pub.Load())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// histogram counts observations in fixed buckets, safe for concurrent
// use. It does not keep its bounds: its owner passes the same ones each
// time (latencyBounds, sizeBounds).
type histogram struct {
	counts [maxBuckets + 1]atomic.Int64
	sum    atomic.Int64
}

// maxBuckets bounds a histogram's bounds.
const maxBuckets = 24

// latencyBounds are the latency histograms' upper bounds in nanoseconds:
// 1-2-5 steps from 1 µs to 10 s.
var latencyBounds = []int64{
	1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5,
	1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8,
	1e9, 2e9, 5e9, 1e10,
}

// sizeBounds are the relay histograms' upper bounds (blobs): 1-2-5 steps
// from 1 to 10,000.
var sizeBounds = []int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}

func (h *histogram) observe(v int64, bounds []int64) {
	v = max(v, 0)
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// HistogramSnapshot is a histogram's figures: Counts[i] observations at
// or under Bounds[i] (not cumulative), the last one above them all. A
// latency histogram's bounds and sum are in nanoseconds.
type HistogramSnapshot struct {
	Bounds []int64 `json:"bounds"`
	Counts []int64 `json:"counts"`
	Sum    int64   `json:"sum"`
	Count  int64   `json:"count"`
}

func (h *histogram) snapshot(bounds []int64) HistogramSnapshot {
	s := HistogramSnapshot{Bounds: bounds, Counts: make([]int64, len(bounds)+1), Sum: h.sum.Load()}
	for i := range s.Counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	return s
}

// Traffic is a snapshot of the per-message metrics.
type Traffic struct {
	// In counts what nodes sent this broker, by kind; Out what routing
	// queued for nodes (once per destination), by kind; Answers what the
	// broker itself queued (receipts, request errors, command answers).
	In, Out, Answers [numMsgKinds]Tally
	// Receipts counts the receipts and publication results the broker
	// passed on or made, by result; RequestErrors the failed responses
	// requesters got (the broker's and the handlers'), by result.
	Receipts, RequestErrors map[string]int64
	// HandshakeFailures counts connections that did not log in, by the
	// result they were closed with (AUTH, VERSION, TIMEOUT, …).
	HandshakeFailures map[string]int64
	// StateWrites counts state writes applied at this broker.
	StateWrites int64
	// Routing is the sampled routing latency: from the start of routing
	// the read batch that brought a message to its queueing for every
	// destination. RoundTrip is the sampled request round trip: from the
	// request's forwarding to its response's. Both in nanoseconds.
	Routing, RoundTrip HistogramSnapshot
	// RelayInbox is the blobs in a device's inbox once a push to it is
	// stored; RelayBatch is the pushes per group commit (fsync) of the
	// relay store. Both empty when the broker is not a relay.
	RelayInbox, RelayBatch HistogramSnapshot
	// Channels counts the messages routed by channel: every one nodes
	// sent (streams, sends, publications, requests, responses), for
	// MaxChannelRates channels, the rest under OtherChannels.
	Channels map[string]int64
	// Queued and QueuedBytes sum the outbound queues; MaxQueued and
	// MaxQueuedBytes are the longest one's.
	Queued, QueuedBytes, MaxQueued, MaxQueuedBytes int64
}

// add adds published counts in and out: a connection's, or the retired
// ones'.
func (s *Traffic) add(in, out *[numMsgKinds]atomicTally) {
	for k := range in {
		i, o := in[k].load(), out[k].load()
		s.In[k].Msgs += i.Msgs
		s.In[k].Bytes += i.Bytes
		s.Out[k].Msgs += o.Msgs
		s.Out[k].Bytes += o.Bytes
	}
}

// Tally is a count of messages and their bytes.
type Tally struct {
	Msgs  int64 `json:"msgs"`
	Bytes int64 `json:"bytes"`
}

// Sent is what the broker queued for nodes of kind k: routed and its own.
func (t *Traffic) Sent(k MsgKind) Tally {
	return Tally{t.Out[k].Msgs + t.Answers[k].Msgs, t.Out[k].Bytes + t.Answers[k].Bytes}
}

func (a *atomicTally) load() Tally { return Tally{a.msgs.Load(), a.bytes.Load()} }

// channelCounts sums the messages per channel of the retired
// connections, the live ones and the links.
func (b *Broker) channelCounts() map[string]int64 {
	t := &b.traffic
	out := map[string]int64{}
	add := func(ch string, n int64) {
		if n > 0 {
			out[ch] += n // at most MaxChannelRates names and OtherChannels: channelRates.admit
		}
	}
	b.bus.eachLink(func(l *endpoint) { l.meter.chans.each(add) })
	b.mu.Lock()
	t.channels.mu.Lock()
	for ch, n := range t.channels.n {
		add(ch, n)
	}
	t.channels.mu.Unlock()
	for c := range b.conns {
		c.meter.chans.each(add)
	}
	b.mu.Unlock()
	return out
}

// Traffic returns the per-message metrics, summed over the connections
// at the time of the call.
func (b *Broker) Traffic() Traffic {
	s := b.trafficSansChannels()
	s.Channels = b.channelCounts()
	return s
}

// trafficSansChannels is Traffic without the per-channel counts (the
// history sampler's, every second, which does not use them).
func (b *Broker) trafficSansChannels() Traffic {
	t := &b.traffic
	var s Traffic
	b.bus.eachLink(func(l *endpoint) { // links to other brokers route what those send here
		s.add(&l.meter.pubIn, &l.meter.pubOut)
	})
	b.mu.Lock()
	for c := range b.conns {
		s.add(&c.meter.pubIn, &c.meter.pubOut)
		msgs, bytes := c.out.Depth()
		s.Queued += int64(msgs)
		s.QueuedBytes += int64(bytes)
		s.MaxQueued = max(s.MaxQueued, int64(msgs))
		s.MaxQueuedBytes = max(s.MaxQueuedBytes, int64(bytes))
	}
	s.add(&t.retiredIn, &t.retiredOut)
	for k := range s.Answers {
		s.Answers[k] = t.answers[k].load()
	}
	b.mu.Unlock()
	s.Receipts, s.RequestErrors = t.receipts.snapshot(), t.requestErrors.snapshot()
	s.HandshakeFailures = t.handshakeFailures.snapshot()
	s.StateWrites = t.stateWrites.Load()
	s.Routing, s.RoundTrip = t.routing.snapshot(latencyBounds), t.rtt.snapshot(latencyBounds)
	s.RelayInbox, s.RelayBatch = t.relay.inbox.snapshot(sizeBounds), t.relay.batch.snapshot(sizeBounds)
	return s
}
