package broker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"busbar/internal/sendq"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

// The relay role: durable, end-to-end-sealed delivery over the ordinary
// broker connection (docs/durable.md#the-relay-on-the-broker-connection).
// The store (package relay) keeps each device's inbox on disk; the broker
// turns bus.durable.* commands into its calls. A push is answered only
// once the fsync covering it is done; the reader admits a connection's
// pushes in order without waiting (up to MaxInflight outstanding), so they
// share fsyncs, and the store's writer queues their answers. A receive
// session belongs to the connection that proved it holds the device's key;
// a newer session for the same device, or on the same connection, ends the
// older one.
//
// On a bus with relay brokers (ClusterOptions.Relays) a device's inbox
// lives on its home broker; a broker that is not the home forwards the
// commands to it (cluster_relay.go).

// relayRole is the broker's relay: the store, and the receive sessions.
type relayRole struct {
	store *relay.Store // nil: this broker is not a relay

	mu       sync.Mutex           // guards the fields below
	sessions map[string]*delivery // device id → its live session
	// What other brokers opened here as the home of their devices'
	// inboxes (cluster_relay.go): their sessions by peer/session id, the
	// order of their connections' pushes by peer/connection, and the
	// goroutines delivering to them, joined by close.
	remote  map[string]*delivery
	origins map[string]*origin
	closed  bool
	wg      sync.WaitGroup
}

// delivery is one receive session, owned by the connection that opened
// it: a goroutine that sends the inbox's blobs until cancel. A session
// another broker opened here for its device has no conn but a peer and a
// sid; one this broker forwards to the device's home has a home, a sid
// and in, the blobs the home sent.
type delivery struct {
	c          *conn
	sess       *relay.Session
	device     string
	peer, home string
	sid        string
	in         chan relayedBlob
	// rid is the id of the bus.durable.receive request that opened a
	// session for a connection (c set): bus.durable.ended repeats it.
	rid    string
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned
	// window holds a token per blob delivered and not yet acked: at most
	// wire.DurableWindow, so a receiver's buffer of that size never
	// overflows.
	window chan struct{}
	// sent numbers the blobs a home sends another broker's session (from
	// 1); got is the last number a session forwarded here took (busbar's
	// own and an edge's, relay_edge.go): one that does not follow ends the
	// session (lost), so a blob lost between brokers is never overtaken
	// by the next.
	sent, got uint64
	edge      bool
	lost      atomic.Bool
}

// durableWork joins what a connection started for the relay: its pushes
// and its delivery goroutine.
type durableWork struct {
	wg      sync.WaitGroup
	mu      sync.Mutex // guards session and broken
	session *delivery
	// broken is the code of the first push refused temporarily since the
	// connection's pipeline started: later pipelined pushes get it too.
	// Only refusals at admission count: a group commit that fails fails
	// the store for good, so every later push is refused anyway.
	broken wire.Result
	// fwdConn names the connection to the homes its pushes are forwarded
	// to; fwdN numbers those pushes (cluster_relay.go).
	fwdConn string
	fwdN    uint64
}

func (r *relayRole) open(dir string, opts relay.Options, log *slog.Logger) error {
	r.sessions, r.remote, r.origins = map[string]*delivery{}, map[string]*delivery{}, map[string]*origin{}
	if dir == "" {
		return nil
	}
	opts.Logger = log
	s, err := relay.Open(dir, opts)
	if err != nil {
		return err
	}
	r.store = s
	return nil
}

func (r *relayRole) close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait() // the sessions of other brokers' devices (they end with the broker's context)
	if r.store == nil {
		return nil
	}
	return r.store.Close()
}

// durable handles the bus.durable.* commands; on success it has answered.
func (b *Broker) durable(c *conn, m *wire.Message, s *subject) *refusal {
	switch s.command {
	case wire.CmdDurablePush:
		return b.durablePush(c, m, s)
	case wire.CmdDurableReceive:
		return b.durableReceive(c, m, s)
	case wire.CmdDurableAck:
		return b.durableAck(c, m, s)
	case wire.CmdDurableInbox:
		device, r := provenDevice(c, m, s)
		if r != nil {
			return r
		}
		if home := b.relayHome(device); home != "" {
			return b.forwardInbox(c, s, device, home)
		}
		if r := b.localRelay(); r != nil {
			return r
		}
		in := b.relay.store.Inbox(device)
		return b.replyJSON(c, *s, wire.DurableInbox{Blobs: in.Blobs, Bytes: in.Bytes}, "the inbox", "")
	}
	return rejectf("unknown control command %s", s.command)
}

// localRelay refuses a command for an inbox kept here when this broker
// keeps none.
func (b *Broker) localRelay() *refusal {
	if b.relay.store == nil {
		return rejectf("this broker is not a relay (serve it with a relay directory)")
	}
	return nil
}

// durablePush admits one blob for the device its clear header names, in
// the order the connection sent it, and returns: the answer goes out from
// the store's writer once the group commit holding the blob is synced. So
// a connection may keep many pushes outstanding (a pipeline, bounded by
// MaxInflight), they keep their order in the inbox, and all of them join
// the same group commits, with no goroutine per push.
//
// A pipelined push (wire.HeaderPipelined) behind one refused temporarily
// is refused with the same code: were it stored, it would be delivered
// before the refused one, which its sender will push again.
func (b *Broker) durablePush(c *conn, m *wire.Message, s *subject) *refusal {
	pipe := m.Value(wire.HeaderPipelined)
	if r := c.durable.pipeline(pipe); r != nil {
		return r
	}
	if c.perms != nil && !c.perms.MayRelay() { // in-process nodes are trusted (perms nil)
		return c.durable.refused(pipe, rejectf("%s may not push to the relay (a principal needs the relay permission: busbar principal add --relay)", c.principal))
	}
	blob := m.Body() // the message's own copy: it outlives the read buffer, and the store keeps it
	if r := b.relayQuota(c, len(blob)); r != nil {
		return c.durable.refused(pipe, r)
	}
	id, err := seal.PeekRecipient(blob)
	if err == nil {
		err = seal.CheckHeader(blob) // sizes, versions and recipients no sealing produces
	}
	if err != nil {
		return refuse(wire.ResultMalformed, "not a sealed blob: "+err.Error())
	}
	if home := b.relayHome(id.String()); home != "" {
		if r := b.forwardPush(c, s, id.String(), blob, pipe, home); r != nil {
			return c.durable.refused(pipe, r)
		}
		return nil
	}
	if r := b.localRelay(); r != nil {
		return r
	}
	if c.inflight.Load() >= int64(b.opts.MaxInflight) {
		return c.durable.refused(pipe, b.tooManyCalls())
	}
	c.inflight.Add(1)
	c.durable.wg.Add(1)
	answer := *s
	err = b.relay.store.PushAsync(id.String(), blob, func(seq relay.Seq, err error) {
		// On the store's writer: queue the answer and return.
		defer c.durable.wg.Done()
		defer c.inflight.Add(-1)
		if err != nil {
			b.answer(c, answer, pushRefusal(err))
			return
		}
		b.traffic.relay.pushed(b.relay.store, id.String())
		b.reply(c, answer, strconv.AppendUint(nil, uint64(seq), 10))
	})
	if err != nil {
		c.inflight.Add(-1)
		c.durable.wg.Done()
		return c.durable.refused(pipe, pushRefusal(err))
	}
	return nil
}

// pipeline starts a new pipeline (wire.PipelineFirst), or returns the
// refusal of a push that joins one (wire.PipelineNext) behind a push
// refused temporarily since it started. A push outside any pipeline (no
// header, or a value it does not know) passes.
func (w *durableWork) pipeline(pipe string) *refusal {
	if pipe == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case pipe == wire.PipelineFirst:
		w.broken = ""
	case pipe == wire.PipelineNext && w.broken != "":
		return refuse(w.broken, "behind a push of this pipeline refused "+string(w.broken))
	}
	return nil
}

// refused notes a refusal at admission of a push of the pipeline and
// returns it: a temporary one breaks the pipeline; a permanent one (the
// entry is dropped, never delivered) does not.
func (w *durableWork) refused(pipe string, r *refusal) *refusal {
	if (pipe == wire.PipelineFirst || pipe == wire.PipelineNext) && r.result != wire.ResultTooLarge && r.result != wire.ResultMalformed {
		w.mu.Lock()
		w.broken = r.result
		w.mu.Unlock()
	}
	return r
}

// pushRefusal is the answer to a push the store refused: its code, and no
// content.
func pushRefusal(err error) *refusal {
	code, ok := relay.RefusalCode(err)
	if !ok {
		return refuse(wire.ResultInternal, "the relay could not store the blob")
	}
	res := wire.ResultInternal
	switch code {
	case relay.TooLarge:
		res = wire.ResultTooLarge
	case relay.Malformed:
		res = wire.ResultMalformed
	case relay.InboxFull:
		res = wire.ResultInboxFull
	case relay.RateLimited:
		res = wire.ResultRateLimited
	case relay.Unavailable:
		res = wire.ResultUnavailable
	}
	return refuse(res, code.String())
}

// durableReceive opens a receive session for the device whose key the
// connection proves it holds, ending any older session of that device.
func (b *Broker) durableReceive(c *conn, m *wire.Message, s *subject) *refusal {
	device, r := provenDevice(c, m, s)
	if r != nil {
		return r
	}
	rid := m.Value(wire.HeaderID)
	if home := b.relayHome(device); home != "" {
		return b.forwardReceive(c, s, device, home, rid)
	}
	if r := b.localRelay(); r != nil {
		return r
	}
	sess, err := b.relay.store.Session(device)
	if err != nil {
		return pushRefusal(err)
	}
	c.durable.mu.Lock()
	defer c.durable.mu.Unlock()
	if old := c.durable.session; old != nil {
		// A new session on this connection replaces the older one, which
		// stops before the new one starts, so deliveries never interleave.
		old.cancel()
		<-old.done
	}
	if c.out.Closing() {
		return rejectf("connection is closing")
	}
	// The answer goes first, so every delivery follows it.
	b.reply(c, *s, nil)
	ctx, cancel := context.WithCancel(b.ctx)
	d := &delivery{c: c, sess: sess, device: device, rid: rid, cancel: cancel, done: make(chan struct{}), window: make(chan struct{}, wire.DurableWindow)}
	c.durable.session = d
	b.relay.mu.Lock()
	old := b.relay.sessions[device]
	b.relay.sessions[device] = d
	b.relay.mu.Unlock()
	if old != nil {
		b.takenOver(old) // a newer session of the device ends the older one
	}
	c.durable.wg.Add(1)
	go func() {
		defer c.durable.wg.Done()
		defer close(d.done)
		b.deliver(ctx, d, sess)
	}()
	return nil
}

// takenOver ends d, which a newer session of its device replaced, and
// tells its receiver (bus.durable.ended): d's connection, or, for a
// session this broker keeps as the home of another broker's device, that
// broker, which tells its connection. A receiver that is not told waits
// for blobs that never come.
func (b *Broker) takenOver(d *delivery) {
	d.cancel()
	switch {
	case d.c != nil:
		body, _ := json.Marshal(wire.DurableEnded{Reason: wire.DurableEndedTakeover})
		m := wire.New(wire.TypeEvent, wire.CmdDurableEnded).WithHeader(wire.HeaderID, d.rid).WithBody(body)
		if !d.c.enqueue(m, time.Time{}) {
			b.log.Debug("relay: could not tell a receiver its session was taken over", "node", d.c.node, "device", d.device)
		}
	case d.peer != "" && b.cl != nil:
		b.cl.tellTakenOver(d)
	}
}

// provenDevice reads a DurableReceive body and checks its proof: the
// public key is the named device's, and it signed this connection's
// nonce. It returns the device id.
func provenDevice(c *conn, m *wire.Message, s *subject) (string, *refusal) {
	var req wire.DurableReceive
	if err := json.Unmarshal(m.Body(), &req); err != nil {
		return "", rejectf("%s: %v", s.command, err)
	}
	s.topic = req.Device
	pub, err := seal.ParsePublic(req.Public)
	if err != nil || pub.ID().String() != req.Device {
		return "", rejectf("the public key is not device %s's", req.Device)
	}
	if !seal.VerifyReceive(pub, c.nonce, req.Sig) {
		return "", rejectf("the signature does not prove device %s's key on this connection", req.Device)
	}
	return req.Device, nil
}

// deliver sends the session's blobs to its connection, in arrival order,
// waiting for room in its queue (a blob is never dropped: it would only
// come again on the next session), until ctx ends.
func (b *Broker) deliver(ctx context.Context, d *delivery, sess *relay.Session) {
	defer func() {
		b.relay.mu.Lock()
		if b.relay.sessions[d.device] == d {
			delete(b.relay.sessions, d.device)
		}
		if d.c == nil {
			delete(b.relay.remote, d.peer+"/"+d.sid)
		}
		b.relay.mu.Unlock()
	}()
	for {
		select {
		case d.window <- struct{}{}: // room in the receiver's window
		case <-ctx.Done():
			return
		}
		blob, err := sess.Next(ctx)
		if err != nil {
			return
		}
		if d.c == nil { // another broker's device
			d.sent++
			if b.cl.sendDelivery(d, blob, d.sent) != nil {
				return // that broker's session stalls until it ends it; the blob comes again next session
			}
			continue
		}
		f := sendq.NewFrame()
		f.TTLOff = -1
		if f.B, err = wire.AppendDurableDeliver(f.B, uint64(blob.Seq), blob.Data); err != nil {
			f.Release()
			b.log.Error("relay: a stored blob does not fit a frame", "device", d.device, "seq", blob.Seq, "err", err)
			<-d.window // nothing went out
			continue
		}
		err = d.c.out.EnqueueFrameWait(ctx, f, time.Time{})
		f.Release()
		if err != nil {
			return
		}
	}
}

// durableAck deletes delivered blobs, named by ranges of sequences, from
// the inbox of the device this connection receives for, and only from it,
// and answers.
func (b *Broker) durableAck(c *conn, m *wire.Message, s *subject) *refusal {
	if d := b.forwardedSession(c); d != nil {
		s.topic = d.device
		return b.forwardAck(c, d, m.Body(), s)
	}
	if r := b.ackRanges(c, m.Body(), &s.topic); r != nil {
		return r
	}
	b.reply(c, *s, nil)
	return nil
}

// durableAckEvent is durableAck sent as an event: nothing is answered, and
// a refused ack is only logged (at debug level: a receiver that sends
// junk only hurts its own inbox, whose blobs come again next session).
func (b *Broker) durableAckEvent(c *conn, m *wire.Message) {
	if d := b.forwardedSession(c); d != nil {
		_ = b.forwardAck(c, d, m.Body(), nil)
		return
	}
	var device string
	if r := b.ackRanges(c, m.Body(), &device); r != nil {
		b.log.Debug("durable ack event refused", "node", c.node, "device", device, "why", clip(r.text))
	}
}

// ackRanges deletes the blobs an ack body names. Only blobs the session
// has delivered are deleted: a range past the last one delivered stops
// there. Each deleted blob makes room for one more delivery. An ack that
// deletes nothing is refused. device is set to the session's device.
func (b *Broker) ackRanges(c *conn, body []byte, device *string) *refusal {
	ranges, err := wire.ParseSeqRanges(body)
	if err != nil {
		return rejectf("ack: the body must be blobs' sequence numbers, as ranges (%v)", err)
	}
	d := c.durable.current()
	if d == nil {
		return rejectf("ack: this connection has no receive session")
	}
	*device = d.device
	return b.ackSession(d, ranges, body)
}

// forwardedSession is c's receive session when its device's home is
// another broker, or nil.
func (b *Broker) forwardedSession(c *conn) *delivery {
	if b.cl == nil {
		return nil // a lone broker keeps every inbox
	}
	if d := c.durable.current(); d != nil && d.home != "" {
		return d
	}
	return nil
}

// current is the connection's receive session, or nil.
func (w *durableWork) current() *delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.session
}

// ackSession deletes the blobs of ranges that session d delivered.
func (b *Broker) ackSession(d *delivery, ranges []wire.SeqRange, body []byte) *refusal {
	last := uint64(d.sess.Delivered())
	acked := 0
	for _, r := range ranges {
		n, err := b.relay.store.AckRange(d.device, relay.Seq(r.Lo), relay.Seq(min(r.Hi, last)))
		if err != nil {
			return pushRefusal(err)
		}
		acked += n
	}
	for range acked { // as many more blobs may go out
		select {
		case <-d.window:
		default:
		}
	}
	if acked == 0 {
		return rejectf("ack: no blob %s in device %s's inbox", clip(string(body)), d.device)
	}
	return nil
}

// stopDelivery ends c's receive session, if any, without waiting: c is
// retired (replaced, lease expired) or closing.
func (c *conn) stopDelivery() {
	c.durable.mu.Lock()
	d := c.durable.session
	c.durable.mu.Unlock()
	if d != nil {
		d.cancel()
	}
}

// endDurable stops what c started for the relay and waits for it: its
// delivery goroutine and its pushes in flight. Only c's serving goroutine
// calls it, once c's queue is closed.
func (c *conn) endDurable() {
	c.stopDelivery()
	c.durable.wg.Wait()
}
