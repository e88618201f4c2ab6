package broker

import "sync/atomic"

// DropReason names why the broker discarded a message that nobody will be
// told about: a stream (fire-and-forget, so it has no answer), or an answer
// whose asker is gone or cannot take it. Each reason has its own counter,
// as derpserver counts its drops, so an operator can tell a slow subscriber
// from a misbehaving publisher.
type DropReason uint8

// The drop reasons. Stats.Drops is indexed by them.
const (
	// DropStreamRefused: a stream message its sender may not publish, or
	// one that fails admission (channel syntax, ttl, payload limit,
	// shutdown under way).
	DropStreamRefused DropReason = iota
	// DropStreamTooLarge: a stream message over the frame limit once the
	// broker stamped its source and deadline.
	DropStreamTooLarge
	// DropQueueFull: a subscriber's outbound queue stayed full for the
	// whole stall a stream message may wait.
	DropQueueFull
	// DropStuckReader: a subscriber's writer had made no progress for a
	// while, so a stream message was dropped without waiting for room.
	DropStuckReader
	// DropUnmatchedAnswer: a response or receipt that matches no open call
	// (late, after its deadline, or forged).
	DropUnmatchedAnswer
	// DropAnswerUndeliverable: an answer the broker owed (a receipt, a
	// reply, a request error, a publication result) that its asker's
	// queue could not take, because it is full or closing.
	DropAnswerUndeliverable
	// DropPeerRefused: a frame another broker sent over NATS that this
	// one does not take: malformed, a command, or from a node that is not
	// that broker's (docs/cluster.md#trust).
	DropPeerRefused
	// DropLinkLost: frames another broker sent this one that NATS lost
	// on the way (a NATS client or server dropped them as a slow
	// consumer, or a reconnection lost them), counted when a later
	// message on the same link shows the gap (docs/cluster.md#flow-control).
	DropLinkLost
	// DropBusKey: a NATS message on the bus's subjects that fails the bus
	// key: not in an envelope, not authenticated by the key, moved to
	// another subject, or stamped outside BusKeyWindow or replayed
	// (docs/cluster.md#bus-key).
	DropBusKey
	// DropQueueMemberGone: a stream message another broker forwarded
	// for a queue's member it chose here that had left (unsubscribed or
	// disconnected) before the choosing broker heard of it; the message
	// is not given to another member (docs/messaging.md#queue-subscriptions).
	DropQueueMemberGone
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{
	DropStreamRefused:       "stream_refused",
	DropStreamTooLarge:      "stream_too_large",
	DropQueueFull:           "queue_full",
	DropStuckReader:         "stuck_reader",
	DropUnmatchedAnswer:     "unmatched_answer",
	DropAnswerUndeliverable: "answer_undeliverable",
	DropPeerRefused:         "peer_refused",
	DropLinkLost:            "link_lost",
	DropBusKey:              "bus_key",
	DropQueueMemberGone:     "queue_member_gone",
}

// String is the reason's name, fit for a metric label.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropReasonNames[r]
	}
	return "unknown"
}

// DropReasons lists every reason, in order.
func DropReasons() []DropReason {
	rs := make([]DropReason, numDropReasons)
	for i := range rs {
		rs[i] = DropReason(i)
	}
	return rs
}

// stats are monotonically increasing counters, exposed by Stats.
type stats struct {
	expiredInQueue, malformed, refused, slowConsumers, writeFailures, leaseExpired, overCapacity, stateRefused, handshakesEvicted, streamStalls, logSuppressed, garbageClosed, handshakesRefused atomic.Int64
	drops                                                                                                                                                                                        [numDropReasons]atomic.Int64
	stateRepairs                                                                                                                                                                                 atomic.Int64
}

func (s *stats) drop(r DropReason) { s.drops[r].Add(1) }

// Stats is a snapshot of the broker's counters.
type Stats struct {
	Nodes          int   // registered nodes
	ExpiredInQueue int64 // messages dropped because their deadline passed in a queue
	Malformed      int64 // frames refused as malformed
	Refused        int64 // messages and commands refused by permissions or limits (REJECTED, AMBIGUOUS)
	SlowConsumers  int64 // connections closed because they stopped reading
	WriteFailures  int64 // connections whose writes failed because the peer was gone (closed, reset)
	LeaseExpired   int64 // nodes removed for silence
	OverCapacity   int64 // connections closed at once because MaxConnections were served
	// HandshakesEvicted counts connections closed while logging in to
	// make room for newer ones (MaxHandshakes, MaxHandshakesPerAddr).
	HandshakesEvicted int64
	// HandshakesRefused counts newcomers refused because every place
	// they could take in the login pool was within its HandshakeGrace.
	HandshakesRefused int64
	// LogSuppressed counts warnings not written because the same
	// connection had one of the same kind written within the last second
	// (malformed frames, refusals); GarbageClosed counts connections
	// closed after MaxMalformedRun frames in a row that did not parse.
	LogSuppressed, GarbageClosed int64
	StateRefused                 int64 // state writes refused: foreign writes to closed keys, opens by non-owners
	// StreamStalls counts the times a stream message waited (up to 2 ms)
	// for room in a subscriber's full queue.
	StreamStalls int64
	// StateRepairs counts the namespaces this broker republished because
	// another broker's digest differed from it (docs/cluster.md#replicated-state).
	StateRepairs int64

	// Drops counts discarded messages per reason (see DropReason).
	Drops [numDropReasons]int64
	// Dropped is the stream messages dropped, for any reason: the sum of
	// the first four reasons.
	Dropped int64
	// DroppedReplies is the answers dropped: unmatched or undeliverable.
	DroppedReplies int64
}

// Stats returns the broker's counters.
func (b *Broker) Stats() Stats {
	s := Stats{
		Nodes:             b.dir.count(),
		ExpiredInQueue:    b.stats.expiredInQueue.Load() + b.expiredInQueues(),
		Malformed:         b.stats.malformed.Load(),
		Refused:           b.stats.refused.Load(),
		SlowConsumers:     b.stats.slowConsumers.Load(),
		WriteFailures:     b.stats.writeFailures.Load(),
		LeaseExpired:      b.stats.leaseExpired.Load(),
		OverCapacity:      b.stats.overCapacity.Load(),
		HandshakesEvicted: b.stats.handshakesEvicted.Load(),
		HandshakesRefused: b.stats.handshakesRefused.Load(),
		LogSuppressed:     b.stats.logSuppressed.Load(),
		GarbageClosed:     b.stats.garbageClosed.Load(),
		StreamStalls:      b.stats.streamStalls.Load(),
		StateRefused:      b.stats.stateRefused.Load(),
		StateRepairs:      b.stats.stateRepairs.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = b.stats.drops[i].Load()
	}
	s.Dropped = s.Drops[DropStreamRefused] + s.Drops[DropStreamTooLarge] + s.Drops[DropQueueFull] + s.Drops[DropStuckReader]
	s.DroppedReplies = s.Drops[DropUnmatchedAnswer] + s.Drops[DropAnswerUndeliverable]
	return s
}

// expiredInQueues sums the expiry counters of the live connections.
func (b *Broker) expiredInQueues() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for c := range b.conns {
		n += c.out.Expired()
	}
	return n
}
