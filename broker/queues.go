package broker

// Queue subscriptions (docs/messaging.md#queue-subscriptions). A
// subscription made as a member of a queue (bus.sub with wire.HeaderQueue)
// shares its channel's events and stream messages with the other members
// of that queue: each goes to one member of each queue (the members of a
// subscription and queue name, taken in turn), and to every subscriber
// outside a queue as before. A node that has a plain subscription
// matching the channel gets the message whatever its queues, and is then
// its queues' choice too (its client gives the message to every matching
// subscription of the node): the queue's other members do not get it. A
// publication's results stay one per candidate node: a member that was
// not given the event reads NO_SUBSCRIBER.
//
// Only on a lone broker for now: the choice across the brokers of a bus
// is not built, so a queue subscription on a bus is refused.

import (
	"slices"
	"strings"

	"busbar/auth"
	"busbar/wire"
)

// checkQueue refuses a queue the broker cannot keep.
func (b *Broker) checkQueue(cmd, queue string) *refusal {
	switch {
	case cmd != wire.CmdSubscribe:
		return rejectf("only a subscription may name a queue")
	case b.cl != nil:
		return rejectf("queue subscriptions are not built for a bus of brokers yet (docs/messaging.md#queue-subscriptions)")
	}
	if err := wire.ValidLabel(queue); err != nil {
		return rejectf("queue name: %v", err)
	}
	return nil
}

func queueName(q string) string {
	if q == "" {
		return "outside any queue"
	}
	return "in queue " + q
}

// setQueueLocked records that subscription sub of c is queue's member
// ("": none). c.mu held.
func (c *conn) setQueueLocked(sub, queue string) {
	if queue == "" {
		if _, ok := c.queues[sub]; ok {
			delete(c.queues, sub)
			c.queued.Add(-1)
		}
		return
	}
	if c.queues == nil {
		c.queues = map[string]string{}
	}
	if _, ok := c.queues[sub]; !ok {
		c.queued.Add(1)
	}
	c.queues[sub] = queue
}

// queueKeys returns, for channel, whether c has a plain subscription
// matching it, and the queue groups (subscription and queue) it is a
// member of that match it.
func (c *conn) queueKeys(channel string, keys []string) (plain bool, _ []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sub := range c.subs {
		if sub != channel && !(auth.IsPattern(sub) && auth.Pattern(sub).Match(channel)) {
			continue
		}
		if q, ok := c.queues[sub]; ok {
			keys = append(keys, sub+"\x00"+q)
		} else {
			plain = true
		}
	}
	return plain, keys
}

// shareQueues returns, of ds (subscribers of channel), those the message
// goes to: every one with a plain subscription matching channel, and one
// member of each queue group, in turn. ds is returned as it is when none
// of them is a queue's member.
func (b *Broker) shareQueues(channel string, ds []*conn) []*conn {
	if !slices.ContainsFunc(ds, func(d *conn) bool { return d.queued.Load() > 0 }) {
		return ds
	}
	keep := make([]*conn, 0, len(ds))
	groups := map[string][]*conn{}
	served := map[string]bool{} // queue groups with a member that gets it anyway
	var keys []string
	for _, d := range ds {
		if d.queued.Load() == 0 {
			keep = append(keep, d)
			continue
		}
		var plain bool
		plain, keys = d.queueKeys(channel, keys[:0])
		for _, k := range keys {
			if plain {
				served[k] = true
			} else {
				groups[k] = append(groups[k], d)
			}
		}
		if plain {
			keep = append(keep, d)
		}
	}
	for key, members := range groups {
		if served[key] {
			continue
		}
		slices.SortFunc(members, func(x, y *conn) int { return strings.Compare(x.node, y.node) })
		chosen := members[b.groups.turn("q\x00"+key)%uint64(len(members))]
		if !slices.Contains(keep, chosen) { // a member of two queues may be chosen twice: once
			keep = append(keep, chosen)
		}
	}
	return keep
}
