package broker

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"busbar/wire"
)

type callKind uint8

const (
	callReceipt callKind = iota + 1 // an event sent to one node, waiting for its receipt
	callRequest                     // a request waiting for its response
	callPublish                     // one candidate of a publication, waiting for its receipt
)

// callKey identifies an open call by the dest that must answer it (a
// node's connection, or a link to another broker) and the message id.
// Binding to the connection, not the node name, is what keeps a replaced
// connection's answers out of the new one's calls (and the reverse).
type callKey struct {
	dest dest
	id   string
}

type call struct {
	kind     callKind
	origin   dest // where the answer goes
	deadline time.Time
	pub      *publication  // callPublish
	nodes    []string      // callPublish on a link: the other broker's candidates it answers for
	sent     int64         // a sampled request's forwarding, ns after Broker.started; 0: not sampled (metrics_counters.go)
	load     *atomic.Int64 // counts this call while it is open, or nil (groups.go)
	again    *chooseAgain  // a group's request sent to a member on another broker (groups.go)
}

// MaxPublishAnswerLead bounds how long before its deadline a publication
// still waiting for candidates is answered, TIMED_OUT for those: a tenth of
// its budget, at most this. The publisher's own deadline is the same, so an
// answer sent at the deadline would arrive after the publisher gave up, and
// one slow node would cost it every other node's result
// (docs/messaging.md#results).
const MaxPublishAnswerLead = 100 * time.Millisecond

// publishAnswerAt is when a publication with this deadline, routed at now,
// is answered if some candidates have not answered by then.
func publishAnswerAt(now, deadline time.Time) time.Time {
	return deadline.Add(-min(deadline.Sub(now)/10, MaxPublishAnswerLead))
}

// publication collects one result per candidate node.
type publication struct {
	origin    dest
	id        string
	deadline  time.Time
	results   []wire.NodeResult
	remaining int
	done      bool
	timer     *time.Timer // answers it at publishAnswerAt; stopped once complete
}

type pendingTable struct {
	mu    sync.Mutex
	calls map[callKey]*call
	pubs  map[*publication]struct{}
}

func (p *pendingTable) init() {
	p.calls = map[callKey]*call{}
	p.pubs = map[*publication]struct{}{}
}

// add opens a call. It fails when the same id is already open towards dest:
// ids are unique per message, so that is a buggy or hostile client.
func (p *pendingTable) add(dest dest, id string, cl *call) bool {
	k := callKey{dest, id}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.calls[k]; dup {
		return false
	}
	p.calls[k] = cl
	if cl.kind != callPublish {
		cl.origin.ep().inflight.Add(1)
	}
	if cl.load != nil {
		cl.load.Add(1)
	}
	if c := owesReceipt(dest, cl); c != nil {
		c.oweLocked()
	}
	return true
}

// take closes and returns the call dest answers, or nil when there is
// none of one of the given kinds: a receipt cannot close a request (nor a
// response a send), so a node cannot discard a sender's answer by replying
// with the wrong kind.
func (p *pendingTable) take(dest dest, id string, kinds ...callKind) *call {
	return p.close(dest, id, true, kinds)
}

// cancel closes the call add just opened, when the message could not be
// queued after all: nothing was answered.
func (p *pendingTable) cancel(dest dest, id string, kind callKind) {
	p.close(dest, id, false, []callKind{kind})
}

func (p *pendingTable) close(dest dest, id string, answered bool, kinds []callKind) *call {
	k := callKey{dest, id}
	p.mu.Lock()
	defer p.mu.Unlock()
	cl := p.calls[k]
	if cl == nil || !slices.Contains(kinds, cl.kind) {
		return nil
	}
	delete(p.calls, k)
	closedLocked(dest, cl, answered)
	return cl
}

// closedLocked settles the counts of call cl towards dest, which was just
// removed from the table (answered, or not).
func closedLocked(dest dest, cl *call, answered bool) {
	if cl.kind != callPublish {
		cl.origin.ep().inflight.Add(-1)
	}
	if cl.load != nil {
		cl.load.Add(-1)
	}
	if c := owesReceipt(dest, cl); c != nil {
		c.paidLocked(answered)
	}
}

// openPub registers pub and arms expire to run at its answer time
// (publishAnswerAt), unless it completes first.
func (p *pendingTable) openPub(pub *publication, now time.Time, expire func()) {
	p.mu.Lock()
	p.pubs[pub] = struct{}{}
	pub.origin.ep().inflight.Add(1)
	pub.timer = time.AfterFunc(publishAnswerAt(now, pub.deadline).Sub(now), expire)
	p.mu.Unlock()
}

// record sets one candidate's result and reports whether the publication is
// now complete (the caller then sends it, exactly once).
func (p *pendingTable) record(pub *publication, node string, r wire.Result) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pub.done {
		return false
	}
	for i := range pub.results {
		if pub.results[i].Node == node && pub.results[i].Result == "" {
			pub.results[i].Result = r
			pub.remaining--
			break
		}
	}
	if pub.remaining > 0 {
		return false
	}
	pub.done = true
	delete(p.pubs, pub)
	pub.origin.ep().inflight.Add(-1)
	if pub.timer != nil {
		pub.timer.Stop()
	}
	return true
}

// dropPending settles every call bound to c, which has closed: calls it had
// to answer fail towards their origin (DISCONNECT, FAILED); calls it was
// waiting on are forgotten.
func (b *Broker) dropPending(c dest) {
	type open struct {
		id string
		cl *call
	}
	var failed []open
	p := &b.pend
	p.mu.Lock()
	for k, cl := range p.calls {
		if k.dest != c && cl.origin != c {
			continue
		}
		delete(p.calls, k)
		closedLocked(k.dest, cl, false)
		if cl.origin != c {
			failed = append(failed, open{k.id, cl})
		}
	}
	for pub := range p.pubs {
		if pub.origin == c { // nobody left to tell
			delete(p.pubs, pub)
			pub.done = true
			if pub.timer != nil {
				pub.timer.Stop()
			}
		}
	}
	p.mu.Unlock()
	e := c.ep()
	for _, f := range failed {
		switch f.cl.kind {
		case callReceipt:
			b.sendReceipt(f.cl.origin, f.id, e.addr, wire.Failed)
		case callRequest:
			b.answer(f.cl.origin, subject{kind: kindRequest, id: f.id}, refuse(wire.ResultDisconnect, e.node+" disconnected before it replied"))
		case callPublish:
			if f.cl.nodes == nil { // a node's own delivery
				b.recordPub(f.cl.pub, e.node, wire.Failed)
			}
			for _, n := range f.cl.nodes { // a link's, for that broker's nodes
				b.recordPub(f.cl.pub, n, wire.Failed)
			}
		}
	}
}

// expirePending closes calls whose deadline passed. The caller already
// timed out on its side. Publications are answered before their deadline
// by their timer (timeOutPub); this is the backstop.
func (b *Broker) expirePending(now time.Time) {
	p := &b.pend
	var late []*publication
	p.mu.Lock()
	for k, cl := range p.calls {
		if now.After(cl.deadline) {
			delete(p.calls, k)
			closedLocked(k.dest, cl, false)
		}
	}
	for pub := range p.pubs {
		if now.After(pub.deadline) {
			late = append(late, pub)
		}
	}
	p.mu.Unlock()
	for _, pub := range late {
		b.timeOutPub(pub)
	}
}

// timeOutPub completes pub with TIMED_OUT for every candidate that has not
// answered.
func (b *Broker) timeOutPub(pub *publication) {
	p := &b.pend
	p.mu.Lock()
	var pending []string
	for _, r := range pub.results {
		if r.Result == "" {
			pending = append(pending, r.Node)
		}
	}
	p.mu.Unlock()
	for _, n := range pending {
		b.recordPub(pub, n, wire.TimedOut)
	}
}

// recordPub records a result and sends the publication's outcome when it
// completes.
func (b *Broker) recordPub(pub *publication, node string, r wire.Result) {
	b.traffic.receipts.add(r)
	if b.pend.record(pub, node, r) {
		b.sendPublished(pub)
	}
}

func (b *Broker) sendPublished(pub *publication) {
	res := slices.Clone(pub.results)
	slices.SortFunc(res, func(a, b wire.NodeResult) int { return strings.Compare(a.Node, b.Node) })
	body, _ := json.Marshal(res)
	m := wire.New(wire.TypeResponse, wire.CmdPublished).
		WithHeader(wire.HeaderReplyTo, pub.id).
		WithHeader(wire.HeaderRC, "0").
		WithBody(body)
	b.post(pub.origin, m)
}

// openRequests counts calls still waiting for a response, for Shutdown.
func (p *pendingTable) openRequests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cl := range p.calls {
		if cl.kind == callRequest {
			n++
		}
	}
	return n
}
