package broker

// A node name claimed on two brokers. On one broker a node that connects
// again replaces its old connection (directory.register). Across brokers
// the broker that registers a node publishes a claim; a broker holding
// the same name compares the two registrations by time (each broker's
// clock; ties by broker name) and closes its own connection with REPLACED
// when the claim is newer. When its own is newer it claims again, so the
// other broker closes the older one: exactly one connection survives, and
// it is the newer one as far as the brokers' clocks agree (docs/cluster.md).

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"busbar/wire"
)

type claimMsg struct {
	Node   string `json:"node"`
	Broker string `json:"broker"`
	IID    string `json:"iid"` // the broker process
	Since  int64  `json:"since"`
}

// newerClaim reports whether registration (since, broker) is newer than
// (oSince, oBroker): later, or as late and from the broker that sorts last.
func newerClaim(since int64, broker string, oSince int64, oBroker string) bool {
	if since != oSince {
		return since > oSince
	}
	return broker > oBroker
}

// claim tells the bus that c now holds its node name here.
func (cl *cluster) claim(c *conn) {
	body, err := wire.JSON(claimMsg{Node: c.node, Broker: cl.b.opts.Name, IID: cl.iid, Since: c.since.UnixNano()})
	if err == nil {
		err = cl.publish(cl.subj.claim+cl.b.opts.Name, nil, body)
	}
	if err != nil {
		cl.b.log.Warn("bus: claim not published", "node", c.node, "err", err)
	}
	cl.changed()
}

// onClaim settles another broker's claim against this broker's holder of
// the name (NATS's goroutine).
func (cl *cluster) onClaim(m *nats.Msg) {
	var cm claimMsg
	if err := json.Unmarshal(m.Data, &cm); err != nil || cm.Broker == cl.b.opts.Name || cm.Broker != sender(m) {
		return
	}
	c := cl.b.dir.lookup(cm.Node)
	if c == nil || c.out.Closing() {
		return
	}
	if !newerClaim(cm.Since, cm.Broker, c.since.UnixNano(), cl.b.opts.Name) {
		cl.claim(c) // ours is newer: the other broker closes its own
		return
	}
	cl.b.log.Info("node replaced by its connection on another broker", "node", c.node, "epoch", c.epoch, "broker", cm.Broker)
	c.closeWith(wire.ResultReplaced, "replaced by a newer connection of the same node on broker "+cm.Broker)
	cl.b.retire(c)
	cl.changed()
}
