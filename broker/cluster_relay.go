package broker

// The durable relay's inboxes from any broker (docs/cluster.md#durable-inboxes).
// With ClusterOptions.Relays every device has one home among the relay
// brokers, chosen by rendezvous hashing of its id over the list, so every
// broker names the same home without asking anyone. The inbox lives in the
// home's relay store, with every guarantee of one broker (fsync before the
// answer, arrival order, each blob once a session, the limits). A broker
// that is not the device's home checks what it can (the blob's header, the
// proof of the device's key on its own connection, the pipeline) and
// forwards the command to the home over NATS core, on
// <prefix>.relay.<home>.<self>; the home answers, and delivers a forwarded
// session's blobs, on <prefix>.relayed.<broker>.<home>.
//
// Order: a connection's pushes leave its broker in order on one NATS
// connection and are admitted in order by the home's one subscription, so
// they reach the inbox in the order sent. NATS core may drop a message (a
// slow consumer): each forwarded push carries its number on its
// connection, and the home refuses a pipelined push that does not follow
// the last one it saw (UNAVAILABLE, and the rest of the pipeline with it),
// so a lost push is retried by its sender, never overtaken.

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/internal/sendq"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

const (
	// DefaultClusterRelayTimeout is how long a broker waits for a device's
	// home to answer a forwarded command before answering UNAVAILABLE
	// itself (ClusterOptions.RelayTimeout). A home that leaves or whose
	// lease runs out fails its commands at once.
	DefaultClusterRelayTimeout = 10 * time.Second
	// clusterRelayOriginIdle is how long a home keeps the order of
	// another broker's connection's pushes after its last push.
	clusterRelayOriginIdle = time.Minute
	// ClusterRelayHeaderRoom is what a forwarded blob leaves of NATS's
	// max_payload for the headers that go with it: a blob larger than
	// max_payload minus this is refused TOO_LARGE by the broker that
	// would forward it.
	ClusterRelayHeaderRoom = 1 << 10
)

// The headers of the relay's NATS messages between brokers, and their ops.
const (
	rhOp     = "op"
	rhID     = "id"
	rhSid    = "sid"
	rhConn   = "conn"
	rhN      = "n"
	rhPipe   = "pipe"
	rhRC     = "rc"
	rhText   = "text"
	rhDevice = "device"
	rhSeq    = "seq"
	rhProto  = "proto" // an edge protocol's inbox (relay_edge.go): its name

	ropPush     = "push"
	ropReceive  = "receive"
	ropAck      = "ack"
	ropAckEvent = "ackev"
	ropEnd      = "end"
	ropInbox    = "inbox"
	ropAnswer   = "answer"
	ropDeliver  = "deliver"
	ropTaken    = "taken" // home → broker: a newer session of the device took over session sid
	// An edge protocol's push and receive (relay_edge.go): ops of their
	// own, so a home that predates them refuses them (an unknown
	// operation, answered as temporary) rather than read them as
	// busbar's.
	ropEdgePush    = "edgepush"
	ropEdgeReceive = "edgereceive"
)

// relayForwards is a broker's side of the inboxes kept elsewhere: the
// commands waiting for their home's answer and the sessions it forwards.
type relayForwards struct {
	mu       sync.Mutex
	next     uint64
	calls    map[uint64]*relayCall
	sessions map[string]*delivery // by sid
}

// addSession numbers d (its sid) and keeps it, before the home is asked:
// the deliveries follow the answer at once. The boot's prefix (iid) keeps
// a session id from meaning two sessions at the home across a restart of
// this broker: the home may still hold the one from before, and must not
// take the new one for it.
func (fw *relayForwards) addSession(iid string, d *delivery) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.sessions == nil {
		fw.sessions = map[string]*delivery{}
	}
	fw.next++
	d.sid = iid + "-" + strconv.FormatUint(fw.next, 10)
	fw.sessions[d.sid] = d
}

// relayCall is a command forwarded to home, answered by then.
type relayCall struct {
	home string
	sent time.Time
	then func(rc wire.Result, text string, body []byte)
}

// relayedBlob is one blob a home delivered for a forwarded session.
type relayedBlob struct {
	seq  uint64
	data []byte
}

// origin is the order of one forwarded connection's pushes at the home.
type origin struct {
	pipe durableWork // only its pipeline state
	next uint64      // the number the next push must carry
	used time.Time
}

// relayHome returns the broker that keeps device's inbox, or "" when it
// is this one (or the bus names no relay brokers).
func (b *Broker) relayHome(device string) string {
	if b.cl == nil || len(b.cl.opts.Relays) == 0 {
		return ""
	}
	var home string
	var best uint64
	for _, r := range b.cl.opts.Relays {
		h := fnv.New64a()
		_, _ = h.Write([]byte(r))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(device))
		if w := h.Sum64(); home == "" || w > best {
			home, best = r, w
		}
	}
	if home == b.opts.Name {
		return ""
	}
	return home
}

// forward publishes msg to home; then, unless nil, gets home's answer,
// or UNAVAILABLE when home leaves or does not answer in time.
func (cl *cluster) forward(home string, msg *nats.Msg, then func(wire.Result, string, []byte)) *refusal {
	if !cl.isPeer(home) {
		return refuse(wire.ResultUnavailable, "the device's relay broker "+home+" is not on the bus")
	}
	if !cl.nc.IsConnected() {
		return refuse(wire.ResultUnavailable, "this broker is cut off from the bus")
	}
	fw := &cl.relay
	var id uint64
	if then != nil {
		fw.mu.Lock()
		if fw.calls == nil {
			fw.calls = map[uint64]*relayCall{}
		}
		fw.next++
		id = fw.next
		fw.calls[id] = &relayCall{home: home, sent: time.Now(), then: then}
		fw.mu.Unlock()
		msg.Header.Set(rhID, strconv.FormatUint(id, 10))
	}
	msg.Subject = cl.opts.SubjectPrefix + ".relay." + home + "." + cl.b.opts.Name
	if err := cl.publish(msg.Subject, msg.Header, msg.Data); err != nil {
		if then != nil {
			fw.mu.Lock()
			delete(fw.calls, id)
			fw.mu.Unlock()
		}
		return refuse(wire.ResultUnavailable, "cannot reach the device's relay broker: "+err.Error())
	}
	return nil
}

// relayMsg is a NATS message of op with the header pairs kv and data.
func relayMsg(op string, data []byte, kv ...string) *nats.Msg {
	m := &nats.Msg{Header: nats.Header{rhOp: []string{op}}, Data: data}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Set(kv[i], kv[i+1])
	}
	return m
}

// answered is the answer of a forwarded command, as then takes it.
func answered(b *Broker, c *conn, s subject) func(wire.Result, string, []byte) {
	return func(rc wire.Result, text string, body []byte) {
		if rc != "" {
			b.answer(c, s, refuse(rc, text))
			return
		}
		b.reply(c, s, body)
	}
}

// forwardPush sends a push to the device's home; the home's answer is
// the push's.
func (b *Broker) forwardPush(c *conn, s *subject, device string, blob []byte, pipe, home string) *refusal {
	if c.inflight.Load() >= int64(b.opts.MaxInflight) {
		return b.tooManyCalls()
	}
	if limit := b.cl.maxPayload() - ClusterRelayHeaderRoom; len(blob) > limit {
		return refuse(wire.ResultTooLarge, "the blob is "+strconv.Itoa(len(blob))+" bytes, over the "+strconv.Itoa(limit)+" a push may have between brokers (NATS's max_payload)")
	}
	conn, n := c.durable.forwarded(b.cl)
	msg := relayMsg(ropPush, blob, rhDevice, device, rhConn, conn, rhN, strconv.FormatUint(n, 10), rhPipe, pipe)
	c.inflight.Add(1)
	reply := answered(b, c, *s)
	r := b.cl.forward(home, msg, func(rc wire.Result, text string, body []byte) {
		c.inflight.Add(-1)
		reply(rc, text, body)
	})
	if r != nil {
		c.inflight.Add(-1)
	}
	return r
}

// forwarded numbers a push this connection forwards: the connection's id
// on the bus, and the push's number on it.
func (w *durableWork) forwarded(cl *cluster) (string, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fwdConn == "" {
		cl.relay.mu.Lock()
		cl.relay.next++
		w.fwdConn = strconv.FormatUint(cl.relay.next, 10)
		cl.relay.mu.Unlock()
	}
	w.fwdN++
	return w.fwdConn, w.fwdN
}

// forwardInbox asks the device's home for its inbox.
func (b *Broker) forwardInbox(c *conn, s *subject, device, home string) *refusal {
	return b.cl.forward(home, relayMsg(ropInbox, nil, rhDevice, device), answered(b, c, *s))
}

// forwardAck sends an ack of a forwarded session to its home: answered
// when s is not nil, an event otherwise.
func (b *Broker) forwardAck(c *conn, d *delivery, body []byte, s *subject) *refusal {
	if s == nil {
		return b.cl.forward(d.home, relayMsg(ropAckEvent, body, rhSid, d.sid), nil)
	}
	return b.cl.forward(d.home, relayMsg(ropAck, body, rhSid, d.sid), answered(b, c, *s))
}

// forwardReceive opens a receive session of device at its home, for c,
// whose proof this broker checked. It ends c's older session first, as a
// local one does.
func (b *Broker) forwardReceive(c *conn, s *subject, device, home, rid string) *refusal {
	cl := b.cl
	c.durable.mu.Lock()
	defer c.durable.mu.Unlock()
	if old := c.durable.session; old != nil {
		old.cancel()
		<-old.done
		c.durable.session = nil
	}
	if c.out.Closing() {
		return rejectf("connection is closing")
	}
	ctx, cancel := context.WithCancel(b.ctx)
	d := &delivery{c: c, device: device, home: home, rid: rid, in: make(chan relayedBlob, wire.DurableWindow), cancel: cancel, done: make(chan struct{})}
	cl.relay.addSession(cl.iid, d)
	reply := answered(b, c, *s)
	r := cl.forward(home, relayMsg(ropReceive, nil, rhDevice, device, rhSid, d.sid), func(rc wire.Result, text string, body []byte) {
		reply(rc, text, body)
		if rc != "" {
			cancel()
		}
	})
	if r != nil {
		cl.dropSession(d)
		cancel()
		return r
	}
	c.durable.session = d
	c.durable.wg.Add(1)
	go func() {
		defer c.durable.wg.Done()
		defer close(d.done)
		b.relayDeliveries(ctx, d)
	}()
	return nil
}

// relayDeliveries sends the blobs the home delivered for d to d's
// connection, waiting for room in its queue, until ctx ends; then it
// tells the home the session ended, and, when a blob was lost on its way
// here, the device (bus.durable.ended, after the last blob it relayed).
func (b *Broker) relayDeliveries(ctx context.Context, d *delivery) {
	defer func() {
		b.cl.dropSession(d)
		_ = b.cl.forward(d.home, relayMsg(ropEnd, nil, rhSid, d.sid), nil)
		if d.lost.Load() {
			body, _ := json.Marshal(wire.DurableEnded{Reason: wire.DurableEndedLost})
			m := wire.New(wire.TypeEvent, wire.CmdDurableEnded).WithHeader(wire.HeaderID, d.rid).WithBody(body)
			if !d.c.enqueue(m, time.Time{}) {
				b.log.Debug("relay: could not tell a receiver its session ended", "node", d.c.node, "device", d.device)
			}
		}
	}()
	for {
		var rb relayedBlob
		select {
		case rb = <-d.in:
		case <-ctx.Done():
			return
		}
		f := sendq.NewFrame()
		f.TTLOff = -1
		var err error
		if f.B, err = wire.AppendDurableDeliver(f.B, rb.seq, rb.data); err != nil {
			f.Release()
			b.log.Error("relay: a blob from the device's home does not fit a frame", "device", d.device, "seq", rb.seq, "err", err)
			return // the home's window would never reopen: end the session
		}
		err = d.c.out.EnqueueFrameWait(ctx, f, time.Time{})
		f.Release()
		if err != nil {
			return
		}
	}
}

func (cl *cluster) dropSession(d *delivery) {
	cl.relay.mu.Lock()
	if cl.relay.sessions[d.sid] == d {
		delete(cl.relay.sessions, d.sid)
	}
	cl.relay.mu.Unlock()
}

// onRelayed takes what a home sends this broker: answers and deliveries
// (NATS's goroutine for the subscription).
func (cl *cluster) onRelayed(m *nats.Msg) {
	home := sender(m)
	fw := &cl.relay
	switch m.Header.Get(rhOp) {
	case ropAnswer:
		id, _ := strconv.ParseUint(m.Header.Get(rhID), 10, 64)
		fw.mu.Lock()
		call := fw.calls[id]
		if call != nil && call.home == home {
			delete(fw.calls, id)
		} else {
			call = nil
		}
		fw.mu.Unlock()
		if call != nil {
			call.then(wire.Result(m.Header.Get(rhRC)), m.Header.Get(rhText), m.Data)
		}
	case ropDeliver:
		seq, err := strconv.ParseUint(m.Header.Get(rhSeq), 10, 64)
		fw.mu.Lock()
		d := fw.sessions[m.Header.Get(rhSid)]
		fw.mu.Unlock()
		if err != nil || d == nil || d.home != home || d.lost.Load() {
			return // ended here: what it was sends again next session
		}
		// Only this goroutine reads and writes d.got. A home before the
		// numbering sends none: nothing to check.
		if n, err := strconv.ParseUint(m.Header.Get(rhN), 10, 64); err == nil {
			if n != d.got+1 {
				// A blob lost between brokers: the session ends, and the
				// next starts again from it (relayDeliveries tells a
				// busbar device; an edge's Next fails).
				d.lost.Store(true)
				cl.b.log.Warn("relay: a blob from a device's home was lost between brokers; ending the session", "home", home, "want", d.got+1, "got", n)
				d.cancel()
				return
			}
			d.got = n
		}
		select {
		case d.in <- relayedBlob{seq: seq, data: m.Data}:
		default: // the home broke the window: start again from what is not acked
			args := []any{"home", home}
			if !strings.Contains(d.device, ".") { // an edge protocol's device id is its key: never logged
				args = append(args, "device", d.device)
			}
			cl.b.log.Warn("relay: a device's home delivered over the window; ending the session", args...)
			d.cancel()
		}
	case ropTaken:
		fw.mu.Lock()
		d := fw.sessions[m.Header.Get(rhSid)]
		fw.mu.Unlock()
		if d != nil && d.home == home {
			cl.b.takenOver(d)
		}
	}
}

// tellTakenOver tells the broker that opened session d here, as its
// device's home, that a newer session of the device took over (the home's
// side of Broker.takenOver).
func (cl *cluster) tellTakenOver(d *delivery) {
	msg := relayMsg(ropTaken, nil, rhSid, d.sid)
	msg.Subject = cl.opts.SubjectPrefix + ".relayed." + d.peer + "." + cl.b.opts.Name
	if err := cl.publish(msg.Subject, msg.Header, msg.Data); err != nil {
		cl.b.log.Debug("relay: could not tell a broker its session was taken over", "broker", d.peer, "device", d.device, "err", err)
	}
}

// relayPeerGone fails what waits on a broker that left, restarted or
// went silent: the commands forwarded to it (UNAVAILABLE), the sessions
// it kept for this broker's devices, and those this broker kept for its.
func (cl *cluster) relayPeerGone(name string) {
	fw := &cl.relay
	var failed []*relayCall
	var ended []*delivery
	fw.mu.Lock()
	for id, call := range fw.calls {
		if call.home == name {
			failed = append(failed, call)
			delete(fw.calls, id)
		}
	}
	for _, d := range fw.sessions {
		if d.home == name {
			ended = append(ended, d)
		}
	}
	fw.mu.Unlock()
	for _, call := range failed {
		call.then(wire.ResultUnavailable, "the device's relay broker "+name+" left the bus", nil)
	}
	for _, d := range ended {
		d.cancel()
	}
	r := &cl.b.relay
	r.mu.Lock()
	for key, d := range r.remote {
		if d.peer == name {
			d.cancel()
			delete(r.remote, key)
		}
	}
	for key := range r.origins {
		if strings.HasPrefix(key, name+"/") {
			delete(r.origins, key)
		}
	}
	r.mu.Unlock()
}

// relayTick answers UNAVAILABLE to the commands whose home did not answer
// within RelayTimeout, and forgets the order of connections that stopped
// pushing here (the publisher's, every heartbeat).
func (cl *cluster) relayTick(now time.Time) {
	fw := &cl.relay
	var failed []*relayCall
	fw.mu.Lock()
	for id, call := range fw.calls {
		if now.Sub(call.sent) > cl.opts.RelayTimeout {
			failed = append(failed, call)
			delete(fw.calls, id)
		}
	}
	fw.mu.Unlock()
	for _, call := range failed {
		call.then(wire.ResultUnavailable, "the device's relay broker "+call.home+" did not answer in "+cl.opts.RelayTimeout.String(), nil)
	}
	r := &cl.b.relay
	r.mu.Lock()
	for key, o := range r.origins {
		if now.Sub(o.used) > clusterRelayOriginIdle {
			delete(r.origins, key)
		}
	}
	r.mu.Unlock()
}

// onRelay takes a command another broker forwards to this one, the home
// of the device it names (NATS's goroutine for the subscription).
func (cl *cluster) onRelay(m *nats.Msg) {
	from := sender(m)
	if from == cl.b.opts.Name || m.Header == nil {
		return
	}
	b := cl.b
	id := m.Header.Get(rhID)
	var r *refusal
	switch m.Header.Get(rhOp) {
	case ropPush:
		r = b.homePush(from, m)
	case ropEdgePush:
		r = b.homeEdgePush(from, m)
	case ropReceive:
		r = b.homeReceive(from, m)
	case ropEdgeReceive:
		r = b.homeEdgeReceive(from, m)
	case ropAck, ropAckEvent:
		if r = b.homeAck(from, m); r == nil {
			cl.answerRelay(from, id, nil, nil) // none for an event: it has no id
		}
	case ropEnd:
		r = nil
		b.relay.mu.Lock()
		d := b.relay.remote[from+"/"+m.Header.Get(rhSid)]
		b.relay.mu.Unlock()
		if d != nil {
			d.cancel()
		}
	case ropInbox:
		if r = b.localRelay(); r == nil {
			in := b.relay.store.Inbox(m.Header.Get(rhDevice))
			var body []byte
			if body, r = b.fitAnswer(wire.DurableInbox{Blobs: in.Blobs, Bytes: in.Bytes}, "the inbox", ""); r == nil {
				cl.answerRelay(from, id, nil, body)
			}
		}
	default:
		r = rejectf("unknown relay operation")
	}
	if r != nil && id != "" {
		cl.answerRelay(from, id, r, nil)
	}
}

// answerRelay answers command id of broker to: body on success, r's
// code and text otherwise.
func (cl *cluster) answerRelay(to, id string, r *refusal, body []byte) {
	if id == "" {
		return
	}
	msg := relayMsg(ropAnswer, body, rhID, id)
	if r != nil {
		msg.Header.Set(rhRC, string(r.result))
		msg.Header.Set(rhText, r.text)
	}
	msg.Subject = cl.opts.SubjectPrefix + ".relayed." + to + "." + cl.b.opts.Name
	_ = cl.publish(msg.Subject, msg.Header, msg.Data) // lost: the broker that asked answers UNAVAILABLE in RelayTimeout
}

// homePush stores a push another broker forwarded; it answers once the
// blob is synced, or returns its refusal.
func (b *Broker) homePush(from string, m *nats.Msg) *refusal {
	if b.relay.store == nil {
		return refuse(wire.ResultUnavailable, "broker "+b.opts.Name+" keeps no inboxes (it has no relay directory)")
	}
	// The forwarding broker checked it; the home keeps the inbox, so it
	// checks again rather than take another broker's (or a NATS
	// client's, without a bus key) word for it.
	id, err := seal.PeekRecipient(m.Data)
	if err == nil {
		err = seal.CheckHeader(m.Data)
	}
	if err != nil {
		return refuse(wire.ResultMalformed, "not a sealed blob: "+err.Error())
	}
	return b.homeAdmit(from, m, id.String())
}

// homeEdgePush stores a push of an edge protocol's device another broker
// forwarded (relay_edge.go): the blob is not parsed; the device id must
// be one of the protocol's, so no edge push reaches a busbar inbox.
func (b *Broker) homeEdgePush(from string, m *nats.Msg) *refusal {
	if b.relay.store == nil {
		return refuse(wire.ResultUnavailable, "broker "+b.opts.Name+" keeps no inboxes (it has no relay directory)")
	}
	device := m.Header.Get(rhDevice)
	if !edgeDevice(m.Header.Get(rhProto), device) {
		return refuse(wire.ResultMalformed, "not a device of that protocol")
	}
	return b.homeAdmit(from, m, device)
}

// homeAdmit admits a forwarded push for device to the store, in its
// connection's order; it answers once the blob is synced, or returns its
// refusal.
func (b *Broker) homeAdmit(from string, m *nats.Msg, device string) *refusal {
	pipe := m.Header.Get(rhPipe)
	n, _ := strconv.ParseUint(m.Header.Get(rhN), 10, 64)
	key := from + "/" + m.Header.Get(rhConn)
	r := &b.relay
	r.mu.Lock()
	o := r.origins[key]
	if o == nil {
		o = &origin{}
		r.origins[key] = o
	}
	o.used = time.Now()
	ref := o.pipe.pipeline(pipe)
	if ref == nil && pipe == wire.PipelineNext && n != o.next {
		ref = o.pipe.refused(pipe, refuse(wire.ResultUnavailable, "an earlier push of this pipeline was lost between brokers"))
	}
	o.next = n + 1
	r.mu.Unlock()
	if ref != nil {
		return ref
	}
	cl, reqID := b.cl, m.Header.Get(rhID)
	err := r.store.PushAsync(device, m.Data, func(seq relay.Seq, err error) {
		if err != nil {
			cl.answerRelay(from, reqID, pushRefusal(err), nil)
			return
		}
		b.traffic.relay.pushed(r.store, device)
		cl.answerRelay(from, reqID, nil, strconv.AppendUint(nil, uint64(seq), 10))
	})
	if err != nil {
		r.mu.Lock()
		ref = o.pipe.refused(pipe, pushRefusal(err))
		r.mu.Unlock()
		return ref
	}
	return nil
}

// homeReceive opens a session another broker asked for, for its device
// (that broker checked the proof); its blobs go back to that broker.
func (b *Broker) homeReceive(from string, m *nats.Msg) *refusal {
	r := &b.relay
	if r.store == nil {
		return refuse(wire.ResultUnavailable, "broker "+b.opts.Name+" keeps no inboxes (it has no relay directory)")
	}
	return b.homeSession(from, m, m.Header.Get(rhDevice), true)
}

// homeEdgeReceive opens a receive session of an edge protocol's device
// another broker asked for (that broker ran the protocol's handshake).
// It ends no other session of the device: an edge protocol may hold
// several at once (trueseal's relay delivers the inbox to each).
func (b *Broker) homeEdgeReceive(from string, m *nats.Msg) *refusal {
	if b.relay.store == nil {
		return refuse(wire.ResultUnavailable, "broker "+b.opts.Name+" keeps no inboxes (it has no relay directory)")
	}
	device := m.Header.Get(rhDevice)
	if !edgeDevice(m.Header.Get(rhProto), device) {
		return refuse(wire.ResultMalformed, "not a device of that protocol")
	}
	return b.homeSession(from, m, device, false)
}

// homeSession opens device's session for broker from; one that takes
// over ends the device's older session.
func (b *Broker) homeSession(from string, m *nats.Msg, device string, takeOver bool) *refusal {
	r := &b.relay
	sess, err := r.store.Session(device)
	if err != nil {
		return pushRefusal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	d := &delivery{sess: sess, device: device, peer: from, sid: m.Header.Get(rhSid), cancel: cancel, done: make(chan struct{}), window: make(chan struct{}, wire.DurableWindow)}
	key := from + "/" + d.sid
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return refuse(wire.ResultUnavailable, "the broker is shutting down")
	}
	var old *delivery
	if takeOver {
		old = r.sessions[device]
		r.sessions[device] = d
	}
	dup := r.remote[key]
	r.remote[key] = d
	r.wg.Add(1)
	r.mu.Unlock()
	if dup != nil {
		dup.cancel() // the same session asked again: nobody to tell
	}
	if old != nil && old != dup {
		b.takenOver(old) // a newer session of the device ends the older one
	}
	b.cl.answerRelay(from, m.Header.Get(rhID), nil, nil) // before any delivery
	go func() {
		defer r.wg.Done()
		defer close(d.done)
		b.deliver(ctx, d, sess)
	}()
	return nil
}

// homeAck applies an ack of a session another broker forwards here.
func (b *Broker) homeAck(from string, m *nats.Msg) *refusal {
	b.relay.mu.Lock()
	d := b.relay.remote[from+"/"+m.Header.Get(rhSid)]
	b.relay.mu.Unlock()
	if d == nil {
		return rejectf("ack: the receive session ended")
	}
	ranges, err := wire.ParseSeqRanges(m.Data)
	if err != nil {
		return rejectf("ack: the body must be blobs' sequence numbers, as ranges (%v)", err)
	}
	return b.ackSession(d, ranges, m.Data)
}

// sendDelivery sends blob number n of session d to the broker that
// opened it.
func (cl *cluster) sendDelivery(d *delivery, blob relay.Blob, n uint64) error {
	msg := relayMsg(ropDeliver, blob.Data, rhSid, d.sid, rhSeq, strconv.FormatUint(uint64(blob.Seq), 10), rhN, strconv.FormatUint(n, 10))
	msg.Subject = cl.opts.SubjectPrefix + ".relayed." + d.peer + "." + cl.b.opts.Name
	return cl.publish(msg.Subject, msg.Header, msg.Data)
}
