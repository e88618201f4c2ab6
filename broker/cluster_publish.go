package broker

// A publication on a bus: one result per candidate node of the whole bus.
// The publisher's broker counts the candidates everywhere (the nodes
// permitted to receive the channel, from the brokers' shares) against
// MaxPublishCandidates before anything is sent, then sends the frame once
// to each other broker with candidates, as one call that broker answers
// with a bus.published of its own nodes' results (a bounded
// scatter-gather: the publication's deadline bounds it, and a broker that
// does not answer in time leaves TIMED_OUT for its nodes).

import (
	"encoding/json"
	"slices"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// publishCandidates returns, per other broker, its nodes permitted to
// receive channel, sorted; names held here are this broker's. Safe on
// nil.
func (cl *cluster) publishCandidates(channel string) map[string][]string {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	var out map[string][]string
	for name, n := range cl.nodes {
		if cl.b.dir.lookup(name) != nil {
			continue
		}
		if n.ReceiveAll || n.recv.Allows(auth.ActionSubscribe, channel) {
			if out == nil {
				out = map[string][]string{}
			}
			out[n.Broker] = append(out[n.Broker], name)
		}
	}
	for _, nodes := range out {
		slices.Sort(nodes)
	}
	return out
}

// scatter sends a publication's frame to every other broker with
// candidates, each as one call answered by routePeerPublished; a broker
// with queue members gets the frame that names those chosen there
// (queues.go).
func (b *Broker) scatter(c *conn, pub *publication, remote map[string][]string, lf *linkFrames) {
	for broker, nodes := range remote {
		l := b.cl.link(broker)
		cl := &call{kind: callPublish, origin: c, deadline: pub.deadline, pub: pub, nodes: nodes}
		f := lf.frame(broker)
		var r wire.Result
		switch {
		case l == nil:
			r = wire.Failed
		case !b.linkFits(f):
			r = wire.Rejected
		case !b.pend.add(l, pub.id, cl):
			r = wire.Rejected
		case !l.out.EnqueueFrame(f, pub.deadline):
			b.pend.cancel(l, pub.id, callPublish)
			r = wire.Backpressured
		default:
			continue
		}
		for _, n := range nodes {
			b.recordPub(pub, n, r)
		}
	}
}

// routePeerPublished records another broker's results for its nodes in
// the publication they answer. A candidate it does not report is gone
// (NOT_CONNECTED); a node it reports that was no candidate here is left
// out: the results are those of the candidates the publisher's broker
// counted.
func (b *Broker) routePeerPublished(c *link, v *hotpath.View) {
	cl := b.pend.take(c, v.Value(wire.HeaderReplyTo), callPublish)
	if cl == nil {
		b.stats.drop(DropUnmatchedAnswer)
		return
	}
	var got []wire.NodeResult
	if rc, err := wire.ParseRC(v.Value(wire.HeaderRC)); err != nil || rc.IsError() || json.Unmarshal(v.Body(), &got) != nil {
		got = nil // refused whole there: every candidate failed
	}
	for _, n := range cl.nodes {
		r := wire.NotConnected
		if got == nil {
			r = wire.Failed
		}
		for _, g := range got {
			if g.Node == n {
				r = knownResult(g.Result)
			}
		}
		b.recordPub(cl.pub, n, r)
	}
}

// knownResult is r when it is a result a receipt may carry, else FAILED.
func knownResult(r wire.Result) wire.Result {
	if slices.Contains(brokerReceiptResults[:], r) {
		return r
	}
	return wire.Failed
}
