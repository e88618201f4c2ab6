package broker

import (
	"strconv"
	"time"

	"busbar/wire"
)

// A node that heartbeats but stopped reading keeps its lease, yet every
// event and publication delivered to it waits for a receipt it will never
// send: each Publish on its channels would wait out its whole timeout.
// The client answers a receipt as soon as it reads the event (ACCEPTED,
// or BACKPRESSURED when its dispatch queue is full), so a node that owes
// receipts and has answered none for ReceiptTimeout is not reading: it
// is a slow consumer. What it owes is answered TIMED_OUT at once, and it
// is disconnected, counted and logged, as a writer that times out is
// (docs/messaging.md#backpressure-per-kind-of-traffic).

// owesReceipt returns the node that owes a receipt for a call towards
// dest, or nil: an event or a publication delivered to a node that is not
// in-process (a link to another broker answers for that broker's nodes,
// which it bounds itself).
func owesReceipt(dest dest, cl *call) *conn {
	if cl.kind != callReceipt && cl.kind != callPublish || !dest.owesReceipts() {
		return nil
	}
	return dest.(*conn)
}

// oweLocked counts one more receipt c owes. Broker.pend.mu is held.
func (c *conn) oweLocked() {
	if c.owed == 0 {
		c.owedSince = int64(time.Since(c.b.started))
	}
	c.owed++
}

// paidLocked counts a receipt c owed as settled; answered says c answered
// it, which restarts its clock. Broker.pend.mu is held.
func (c *conn) paidLocked(answered bool) {
	c.owed--
	if answered || c.owed == 0 {
		c.owedSince = int64(time.Since(c.b.started))
	}
}

// owesReceiptsTooLong reports whether c has owed receipts and answered
// none for ReceiptTimeout.
func (b *Broker) owesReceiptsTooLong(c *conn, now time.Time) bool {
	p := &b.pend
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.owed > 0 && now.Sub(b.started.Add(time.Duration(c.owedSince))) > b.opts.ReceiptTimeout
}

// cutForReceipts answers TIMED_OUT every receipt c owes and disconnects
// it as a slow consumer.
func (b *Broker) cutForReceipts(c *conn) {
	type owedCall struct {
		id string
		cl *call
	}
	var owed []owedCall
	p := &b.pend
	p.mu.Lock()
	for k, cl := range p.calls {
		if k.dest == dest(c) && owesReceipt(c, cl) != nil {
			delete(p.calls, k)
			if cl.kind != callPublish {
				cl.origin.ep().inflight.Add(-1)
			}
			c.paidLocked(false)
			owed = append(owed, owedCall{k.id, cl})
		}
	}
	p.mu.Unlock()
	text := "stopped reading: owed " + strconv.Itoa(len(owed)) + " receipts and answered none for " + b.opts.ReceiptTimeout.String()
	c.mu.Lock()
	first := c.reason == ""
	if first {
		c.reason = wire.ResultSlow
	}
	c.mu.Unlock()
	if first { // not already closing (its writer timed out, its lease ran out…)
		b.stats.slowConsumers.Add(1)
		b.events.add(Event{Kind: EventSlow, Node: c.node, Text: text})
		b.refusals.Warn("no receipts; disconnecting slow consumer", remoteHost(c.nc), "node", c.node, "epoch", c.epoch, "owed", len(owed), "receipt_timeout", b.opts.ReceiptTimeout)
	}
	c.closeWith(wire.ResultSlow, text)
	b.retire(c)
	// Counted and cut first: whoever reads a TIMED_OUT below sees it done.
	for _, o := range owed {
		switch o.cl.kind {
		case callReceipt:
			b.sendReceipt(o.cl.origin, o.id, c.addr, wire.TimedOut)
		case callPublish:
			b.recordPub(o.cl.pub, c.node, wire.TimedOut)
		}
	}
}
