package client

import (
	"sync/atomic"
	"time"

	"busbar/wire"
)

// Backpressure, per kind of traffic, on this side of the connection: a
// caller's own message that does not fit the outbound queue fails its call
// (BACKPRESSURED, OVERLOAD); a stream message is paced (Emit waits for
// room). What the client sends on its own behalf, from a goroutine that must
// not wait (the reader, a worker answering a request, a lock holder), is
// dropped when the queue is full and counted here by reason: waiting would
// stall the connection or the dispatch pool for everyone, and each drop has
// a bounded consequence, written beside its counter.

// Stats are the client's counters of what it dropped rather than block.
// Each only grows. A closing connection drops everything still to be sent;
// that is not counted.
type Stats struct {
	// Dropped: stream messages dropped because the dispatch queue was full
	// (also Client.Dropped).
	Dropped int64
	// DroppedReceipts: receipts for events the broker gave this node that
	// the outbound queue had no room for. The sender reads TIMED_OUT (or
	// FAILED); the event was handled or not as its receipt would have said.
	DroppedReceipts int64
	// DroppedReplies: answers to requests (a handler's reply, NO_HANDLER,
	// OVERLOAD) that the outbound queue had no room for. The requester
	// times out; a handler that ran stays run.
	DroppedReplies int64
	// DroppedWithdrawals: bus.unsub, bus.unhandle, bus.unwatch and
	// bus.state.unwatch that the outbound queue had no room for. The broker
	// keeps sending what this node no longer wants, which it answers
	// NO_SUBSCRIBER or NO_HANDLER, or ignores, until the connection ends;
	// the registration still counts against the broker's MaxRegistrations.
	DroppedWithdrawals int64
	// DroppedHeartbeats: heartbeats the outbound queue had no room for.
	// Harmless: frames are then waiting to be written, and a writer that
	// cannot write them ends the connection (WriteTimeout).
	DroppedHeartbeats int64
}

// drops are the counters behind Stats.
type drops struct {
	streams, receipts, replies, withdrawals, heartbeats atomic.Int64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Dropped:            c.drops.streams.Load(),
		DroppedReceipts:    c.drops.receipts.Load(),
		DroppedReplies:     c.drops.replies.Load(),
		DroppedWithdrawals: c.drops.withdrawals.Load(),
		DroppedHeartbeats:  c.drops.heartbeats.Load(),
	}
}

// Dropped counts stream messages this node dropped because its dispatch
// queue was full.
func (c *Client) Dropped() int64 { return c.drops.streams.Load() }

// queueOrCount queues m for a sender that must not wait, counting in n a
// message the full queue refused (a closing queue refuses everything: that
// is the connection ending, not a drop). m goes on cn, the connection it
// belongs to.
func (c *Client) queueOrCount(cn *conn, m *wire.Message, deadline time.Time, n *atomic.Int64) {
	if !cn.out.Enqueue(m, deadline) && !cn.out.Closing() {
		n.Add(1)
	}
}
