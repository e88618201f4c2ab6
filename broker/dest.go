package broker

import (
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
)

// dest is what a routed message is put into: a node's connection (conn),
// or a link to another broker (link, cluster_link.go), which stands for
// that broker's nodes. Routing asks a dest what it takes and how, never
// which kind it is; what a link brought in is routed from one entry of
// its own (dispatchLink, route_link.go). Open calls are keyed by the dest
// that must answer them (pending.go), and a call's origin is the dest its
// answer goes back to.
type dest interface {
	ep() *endpoint
	// hasSub and hasHandler report whether a message on channel has a
	// taker here; a link says yes to both: the other broker decides.
	hasSub(channel string) bool
	hasHandler(channel string) bool
	allows(a auth.Action, channel string) bool
	// address is what the receipt of a send to node says it came from
	// (node is the target's name as resolved).
	address(node string) string
	// put queues fw within the queue's limits (below its pace mark with
	// paced), holding the wake-up in h; it returns the bytes queued, and
	// false when the queue is full.
	put(h *held, fw *forward, deadline time.Time, paced bool) (int, bool)
	// putStream queues a stream message, waiting for room as this kind
	// of destination is waited for (enqueueStream); on a failure it says
	// why the message is dropped.
	putStream(fw *forward, deadline time.Time, h *held) (int, DropReason, bool)
	// fits reports whether fw, forwarded, can reach the destination: a
	// link is bounded by NATS's max_payload (it makes fw's shared frame).
	fits(fw *forward) bool
	// requestLoad counts the requests open towards this destination, for
	// a service group's choice (groups.go); nil when the other broker
	// counts them.
	requestLoad() *atomic.Int64
	// owesReceipts reports whether the receipts of events and publication
	// deliveries it is sent count against it (receiptstall.go): a node's
	// do; a link answers for nodes that the other broker bounds.
	owesReceipts() bool
}

func (c *conn) ep() *endpoint              { return &c.endpoint }
func (c *conn) address(string) string      { return c.addr }
func (c *conn) fits(*forward) bool         { return true }
func (c *conn) requestLoad() *atomic.Int64 { return &c.openRequests }
func (c *conn) owesReceipts() bool         { return !c.inproc }
func (c *conn) putStream(fw *forward, deadline time.Time, h *held) (int, DropReason, bool) {
	return c.enqueueStream(fw, deadline, h)
}

// put queues fw for c in place when its length is known (no shared
// frame, no copy by c's writer), else the shared frame.
func (c *conn) put(h *held, fw *forward, deadline time.Time, paced bool) (int, bool) {
	if fw.size > 0 {
		var buf *[]byte
		var ok bool
		if paced {
			buf, ok = c.out.ReservePaced(fw.size)
		} else {
			buf, ok = c.out.Reserve(fw.size)
		}
		if !ok {
			return 0, false
		}
		var ttlOff int
		*buf, ttlOff = hotpath.AppendForward(*buf, fw.v, fw.from, fw.ttl)
		h.stage(&c.endpoint, ttlOff, deadline)
		return fw.size, true
	}
	f := fw.frame()
	return len(f.B), h.enqueue(&c.endpoint, f, deadline, paced)
}
