package broker

import (
	"errors"
	"hash/maphash"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/sendq"
	"busbar/wire"
)

// endpoint is what routing puts messages into and answers through: a
// queue with its writer, a name, and the counters of what passes. A
// node's connection (conn) and a link to another broker (link,
// cluster_link.go) are both one; dest says how each takes a message.
type endpoint struct {
	b    *Broker
	nc   net.Conn
	out  *sendq.Queue
	node string // node name, set by the handshake; a link's: the other broker's
	addr string // node + ".bus", what "from" says

	readAt   atomic.Int64 // when the frames in the read buffer arrived, in ns after b.started; 0: unknown (see now)
	inflight atomic.Int64 // calls this endpoint is waiting on
	// stallFailed is the writer's LastWrite (unix ns) when a producer last
	// waited in vain for room in this queue (enqueueStream): until the
	// writer progresses, nobody waits again.
	stallFailed atomic.Int64
	meter       meter    // traffic counters (metrics_counters.go)
	logs        connLogs // warnings about it, rate-limited (connlog.go)

	// The forward being routed, and a link's copy of it (route.go:
	// forwarding); owned by the endpoint's reader.
	fw, fwLink forward

	mu     sync.Mutex  // guards reason, and conn's fields it says
	reason wire.Result // why it closed
}

// conn is one node's connection.
type conn struct {
	endpoint
	epoch uint64
	since time.Time // when it registered: orders two claims of its name across brokers (cluster_claim.go)
	iid   string    // the client instance's id, set by the handshake
	// principal is who authenticated (empty in-process), for provenance.
	principal string
	// capped: c's principal counts against MaxNodesPerPrincipal (it may
	// not use every channel). Set before c registers.
	capped bool
	perms  *auth.Permissions // nil: everything allowed (in-process)
	inproc bool
	as     *auth.Principal // an in-process connection authenticated at the edge (DialInProcessAs)
	// advertised is the hello's Advertise; set once at login.
	advertised string

	lastRead atomic.Int64 // unix ns of the sweep that last saw a frame (never later than the truth by more than a sweep)
	active   atomic.Bool  // a frame arrived since the last sweep
	queued   atomic.Int32 // len(queues): routing skips the queue rules for nodes without any
	// openRequests are the requests open towards this connection: how
	// busy a member of a service group is (groups.go).
	openRequests atomic.Int64
	// allowed remembers, per action, the last channel the permissions
	// allowed: a stream of messages on one channel checks its patterns
	// once. Readers of other connections consult it too, hence atomic.
	allowed [nActions]atomic.Pointer[string]
	// lastGranted is, per action, the hash of the last channel granted
	// without being remembered in allowed.
	lastGranted [nActions]atomic.Uint64

	// c's place among the connections logging in, set before c logs in
	// and cleared once its hello is read, by c's reader (the place's
	// fields are guarded by Broker.hs.mu).
	place *loginPlace
	hello helloMeter // what c's reader reads from: nc, measured while c holds a place
	local bool       // a local (Unix socket) peer, for Options.LocalReserve; set by track

	// Receipts c owes (receiptstall.go): how many events and publication
	// deliveries wait for its receipt, and since when (ns after
	// Broker.started) it has owed some without answering any. Guarded by
	// Broker.pend.mu.
	owed      int
	owedSince int64

	malformedRun int // frames in a row that did not parse; owned by c's reader

	nonce   []byte      // the handshake's nonce, set before the node registers; read-only after
	durable durableWork // what the relay runs for this connection (relay.go)

	// Guarded by endpoint.mu:
	subs    map[string]struct{} // channels and patterns with subscribers on this node
	queues  map[string]string   // of subs, those made as a queue's member: the queue (queues.go)
	pats    int                 // how many of subs are wildcard patterns
	handles map[string]struct{} // channels this node handles (patterns too, for an edge's node: control.go)
	hpats   int                 // how many of handles are wildcard patterns
}

func newConn(b *Broker, nc net.Conn) *conn {
	c := &conn{
		endpoint: endpoint{b: b, nc: nc, out: sendq.New(nc, sendq.Limits{
			MaxBytes: b.opts.MaxQueueBytes, MaxMessages: b.opts.MaxQueueMessages, WriteTimeout: b.opts.WriteTimeout,
		})},
		subs: map[string]struct{}{}, handles: map[string]struct{}{},
	}
	c.lastRead.Store(time.Now().UnixNano())
	return c
}

// now is when the frame being routed arrived: one clock read per batch of
// frames a read brought in, which is also the truer start of their
// deadline. It is the connection reader's, but atomic so that tests may
// route as the node while that reader idles.
func (c *endpoint) now() time.Time {
	d := c.readAt.Load()
	if d == 0 {
		d = max(1, int64(time.Since(c.b.started)))
		c.readAt.Store(d)
	}
	return c.b.started.Add(time.Duration(d))
}

// enqueue queues m for the peer without blocking. It reports false when the
// queue is full or closing: the caller answers BACKPRESSURED.
func (c *endpoint) enqueue(m *wire.Message, deadline time.Time) bool {
	return c.out.Enqueue(m, deadline)
}

// writeLoop runs the outbound queue. A write that times out means the
// peer stopped reading: a slow consumer. Any other failure means the peer
// is gone (it closed, or reset the connection).
func (c *endpoint) writeLoop() {
	err := c.out.Run()
	if err == nil {
		return
	}
	c.mu.Lock()
	node := c.node
	cut := c.reason == wire.ResultSlow // cut already for owing receipts (receiptstall.go), and counted then
	c.mu.Unlock()
	if cut {
		return
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.b.stats.writeFailures.Add(1)
		c.setReason(wire.ResultDisconnect)
		c.b.log.Debug("write failed; the peer is gone", "node", node, "remote", remote(c.nc), "err", err)
		return
	}
	c.setReason(wire.ResultSlow)
	c.b.stats.slowConsumers.Add(1)
	c.b.events.add(Event{Kind: EventSlow, Node: node, Text: err.Error()})
	c.b.refusals.Warn("write timed out; disconnecting slow consumer", remoteHost(c.nc), "node", node, "err", err)
}

func (c *endpoint) setReason(r wire.Result) {
	c.mu.Lock()
	if c.reason == "" {
		c.reason = r
	}
	c.mu.Unlock()
}

// close starts closing: nothing more is queued, the writer sends what is
// queued and closes the socket, which ends the reader.
func (c *endpoint) close(reason wire.Result) {
	c.setReason(reason)
	c.out.Close(nil)
}

// closeWith is close with a last bus.error frame saying why.
func (c *endpoint) closeWith(reason wire.Result, text string) {
	c.setReason(reason)
	c.out.Close(errorFrame(reason, text))
}

// finish closes the connection and waits for its writer. Only the
// connection's serving goroutine calls it.
func (c *endpoint) finish() {
	c.close(wire.ResultDisconnect)
	<-c.out.Done()
}

func errorFrame(reason wire.Result, text string) *wire.Message {
	return wire.New(wire.TypeEvent, wire.CmdError).
		WithHeader(wire.HeaderRC, strconv.Itoa(int(wire.RCFailure))).
		WithHeader(wire.HeaderResult, string(reason)).
		WithHeader(wire.HeaderError, text)
}
func (c *conn) hasSub(channel string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[channel]; ok || c.pats == 0 {
		return ok
	}
	// At most MaxRegistrations patterns, and only on nodes that have any.
	for name := range c.subs {
		if auth.IsPattern(name) && auth.Pattern(name).Match(channel) {
			return true
		}
	}
	return false
}

func (c *conn) hasHandler(channel string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.handles[channel]; ok || c.hpats == 0 {
		return ok
	}
	for name := range c.handles {
		if auth.IsPattern(name) && auth.Pattern(name).Match(channel) {
			return true
		}
	}
	return false
}

const nActions = 5

func actionIndex(a auth.Action) int {
	switch a {
	case auth.ActionSend:
		return 0
	case auth.ActionRequest:
		return 1
	case auth.ActionPublish:
		return 2
	case auth.ActionSubscribe:
		return 3
	case auth.ActionHandle:
		return 4
	}
	return -1
}

// allows reports whether c's permissions allow a on channel. They are
// fixed at the handshake, so a remembered verdict stays true.
func (c *conn) allows(a auth.Action, channel string) bool {
	if c.perms == nil {
		return true
	}
	i := actionIndex(a)
	if i < 0 {
		return c.perms.Allows(a, channel)
	}
	slot := &c.allowed[i]
	if last := slot.Load(); last != nil && *last == channel {
		return true
	}
	if !c.perms.Allows(a, channel) {
		return false
	}
	// Remember the channel once it is granted twice in a row (a copy:
	// channel may alias a read buffer). Traffic that cycles over many
	// channels would otherwise allocate a copy per message and never
	// use it.
	if h := maphash.String(allowSeed, channel); c.lastGranted[i].Swap(h) == h {
		kept := strings.Clone(channel)
		slot.Store(&kept)
	}
	return true
}

// allowSeed seeds the hashes of lastGranted.
var allowSeed = maphash.MakeSeed()

// held is what a reader queued for other connections without waking their
// writers while it routes the frames one read brought in; flush hands each
// destination its batch once (sendq.Queue.Flush: written in place when the
// destination's writer is idle), saving a writer wake-up per frame. A nil
// held wakes each writer at once, for callers that route frames one by one
// (tests). Owned by one reader goroutine (a node's, or onLink).
type held struct {
	dests   []*endpoint
	seen    map[*endpoint]struct{} // dests as a set, once there are more than heldScan
	flushes int                    // flushes that had something to hand on: a read's batch should cost one
}

// heldScan is how many destinations a held batch finds by scanning before
// it keeps a set.
const heldScan = 8

// enqueue queues f for d (below d's pace mark with paced:
// sendq.ReserveShare), holding the wake-up when h is not nil.
func (h *held) enqueue(d *endpoint, f *sendq.Frame, deadline time.Time, paced bool) bool {
	var ok bool
	if paced {
		ok = d.out.EnqueuePacedHeld(f, deadline)
	} else {
		ok = d.out.EnqueueFrameHeld(f, deadline)
	}
	if ok {
		h.hold(d)
	}
	return ok
}

// stage queues the frame appended to d's queue since a Reserve (which
// locked it), holding the wake-up when h is not nil.
func (h *held) stage(d *endpoint, ttlOff int, deadline time.Time) {
	d.out.Stage(ttlOff, deadline)
	h.hold(d)
}

// hold notes that d has frames to hand on at the next flush, or wakes
// its writer at once when h is nil.
func (h *held) hold(d *endpoint) {
	if h == nil {
		d.out.Wake()
		return
	}
	h.add(d)
}

func (h *held) add(d *endpoint) {
	if len(h.dests) < heldScan {
		if !slices.Contains(h.dests, d) {
			h.dests = append(h.dests, d)
		}
		return
	}
	if h.seen == nil {
		h.seen = map[*endpoint]struct{}{}
	}
	if len(h.seen) == 0 {
		for _, x := range h.dests {
			h.seen[x] = struct{}{}
		}
	}
	if _, ok := h.seen[d]; !ok {
		h.seen[d] = struct{}{}
		h.dests = append(h.dests, d)
	}
}

// flush hands every held destination what was queued for it.
func (h *held) flush() {
	if h == nil || len(h.dests) == 0 {
		return
	}
	h.flushes++
	for i, d := range h.dests {
		d.out.Flush()
		h.dests[i] = nil
	}
	h.dests = h.dests[:0]
	clear(h.seen)
}
