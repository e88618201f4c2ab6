package broker

// The relay's inboxes as an edge serving another relay protocol reaches
// them (package trueseal): in this broker's store, or, on a bus with relay
// brokers (ClusterOptions.Relays), in the store of each device's home,
// through the forwarding of cluster_relay.go. The edge ran its protocol's
// handshake and names the device; the broker never parses a blob. An edge
// protocol's device ids are its name, a dot and the rest: busbar's own
// device ids (base32) hold no dot, so neither reaches the other's inboxes,
// and a home takes an edge push only for a device id of the protocol it
// names.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"busbar/relay"
	"busbar/wire"
)

// ErrNoInboxes: the broker keeps no relay store and its bus names no relay
// brokers, so it reaches no inbox.
var ErrNoInboxes = errors.New("broker: no relay store here and no relay brokers on the bus")

// EdgeInboxes are the inboxes of one edge protocol's devices, wherever
// each is kept.
type EdgeInboxes struct {
	b     *Broker
	proto string
}

// EdgeInboxes returns the inboxes of edge protocol proto (a lowercase
// name, e.g. "trueseal"), whose device ids start with proto and a dot.
func (b *Broker) EdgeInboxes(proto string) (*EdgeInboxes, error) {
	if !edgeProto(proto) {
		return nil, errors.New("broker: an edge protocol's name is lowercase letters")
	}
	if b.relay.store == nil && (b.cl == nil || len(b.cl.opts.Relays) == 0) {
		return nil, ErrNoInboxes
	}
	return &EdgeInboxes{b: b, proto: proto}, nil
}

func edgeProto(p string) bool {
	if p == "" || len(p) > 16 {
		return false
	}
	for _, c := range p {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// edgeDevice reports whether device is a device id of edge protocol proto.
func edgeDevice(proto, device string) bool {
	return edgeProto(proto) && len(device) > len(proto)+1 && strings.HasPrefix(device, proto+".")
}

// storeErr is the store's error for a refusal from a device's home, so an
// edge tells permanent from temporary as for its own store. A code the
// store has no name for (a home that does not know edge operations, a
// command it rejected) is temporary: the pusher keeps the blob.
func storeErr(r *refusal) error {
	switch r.result {
	case wire.ResultTooLarge:
		return relay.ErrTooLarge
	case wire.ResultMalformed:
		return relay.ErrMalformed
	case wire.ResultInboxFull:
		return relay.ErrInboxFull
	case wire.ResultRateLimited:
		return relay.ErrRateLimited
	case wire.ResultUnavailable:
		return relay.ErrUnavailable
	}
	return relay.ErrInternal
}

// EdgePusher is one session's pushes. Those forwarded to a home are
// numbered as one connection's pipeline (cluster_relay.go): the home takes
// them in order and refuses one behind a gap or behind a push it refused
// for now, so none is stored ahead of an earlier one its sender will push
// again.
type EdgePusher struct {
	x    *EdgeInboxes
	mu   sync.Mutex
	conn string // the session's name towards the homes, set on its first forwarded push
	n    uint64
}

// Pusher starts a push session.
func (x *EdgeInboxes) Pusher() *EdgePusher { return &EdgePusher{x: x} }

// PushAsync admits blob for device, as relay.Store.PushAsync does: then
// gets the blob's sequence once it is on disk (on its home), or the
// refusal; an error returned is a refusal at admission, and then is not
// called. then runs on a goroutine of the store or of NATS: it must not
// block.
func (p *EdgePusher) PushAsync(device string, blob []byte, then func(relay.Seq, error)) error {
	x := p.x
	if !edgeDevice(x.proto, device) {
		return relay.ErrMalformed
	}
	b := x.b
	home := b.relayHome(device)
	if home == "" {
		if b.relay.store == nil {
			return relay.ErrUnavailable
		}
		return b.relay.store.PushAsync(device, blob, then)
	}
	cl := b.cl
	if len(blob) > cl.maxPayload()-ClusterRelayHeaderRoom {
		return relay.ErrTooLarge
	}
	p.mu.Lock()
	if p.conn == "" {
		cl.relay.mu.Lock()
		cl.relay.next++
		p.conn = strconv.FormatUint(cl.relay.next, 10)
		cl.relay.mu.Unlock()
	}
	p.n++
	n, conn := p.n, p.conn
	p.mu.Unlock()
	pipe := wire.PipelineNext
	if n == 1 {
		pipe = wire.PipelineFirst
	}
	msg := relayMsg(ropEdgePush, blob, rhProto, x.proto, rhDevice, device, rhConn, conn, rhN, strconv.FormatUint(n, 10), rhPipe, pipe)
	r := cl.forward(home, msg, func(rc wire.Result, text string, body []byte) {
		if rc != "" {
			then(0, storeErr(&refusal{result: rc, text: text}))
			return
		}
		seq, err := strconv.ParseUint(string(body), 10, 64)
		if err != nil {
			then(0, relay.ErrInternal)
			return
		}
		then(relay.Seq(seq), nil)
	})
	if r != nil {
		return storeErr(r)
	}
	return nil
}

// EdgeSession is a receive session of one device: its inbox's blobs in
// arrival order, each once; a blob not acked comes again on a new
// session. Close it when the device leaves.
type EdgeSession struct {
	x      *EdgeInboxes
	device string
	local  *relay.Session // the inbox is here
	d      *delivery      // the inbox is on d.home
	ctx    context.Context
	once   sync.Once
}

// Receive opens device's receive session, waiting for its home to open it
// when the inbox is elsewhere (ctx bounds the wait; so does the bus's
// RelayTimeout). The session ends, and Next fails, when its home leaves
// the bus or stops delivering to it, or when a blob the home sent is lost
// between brokers (the home numbers them): the edge then closes its
// device's connection, and the device, reconnecting, gets what it did not
// ack, in order.
func (x *EdgeInboxes) Receive(ctx context.Context, device string) (*EdgeSession, error) {
	if !edgeDevice(x.proto, device) {
		return nil, relay.ErrMalformed
	}
	b := x.b
	home := b.relayHome(device)
	if home == "" {
		if b.relay.store == nil {
			return nil, relay.ErrUnavailable
		}
		sess, err := b.relay.store.Session(device)
		if err != nil {
			return nil, err
		}
		return &EdgeSession{x: x, device: device, local: sess}, nil
	}
	cl := b.cl
	dctx, cancel := context.WithCancel(b.ctx)
	d := &delivery{device: device, home: home, in: make(chan relayedBlob, wire.DurableWindow), cancel: cancel, done: make(chan struct{}), edge: true}
	close(d.done) // no goroutine of the broker's delivers it: the edge reads d.in
	cl.relay.addSession(cl.iid, d)
	s := &EdgeSession{x: x, device: device, d: d, ctx: dctx}
	answer := make(chan error, 1)
	r := cl.forward(home, relayMsg(ropEdgeReceive, nil, rhProto, x.proto, rhDevice, device, rhSid, d.sid), func(rc wire.Result, text string, _ []byte) {
		if rc != "" {
			answer <- storeErr(&refusal{result: rc, text: text})
			return
		}
		answer <- nil
	})
	if r != nil {
		cl.dropSession(d)
		cancel()
		return nil, storeErr(r)
	}
	var err error
	select {
	case err = <-answer:
	case <-ctx.Done():
		err = ctx.Err()
	case <-dctx.Done(): // the home left, or this broker is closing
		err = relay.ErrUnavailable
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Next returns the session's next blob, waiting for one; it fails when ctx
// ends or the session does.
func (s *EdgeSession) Next(ctx context.Context) (relay.Blob, error) {
	if s.local != nil {
		return s.local.Next(ctx)
	}
	select {
	case rb := <-s.d.in:
		return relay.Blob{Seq: relay.Seq(rb.seq), Data: rb.data}, nil
	case <-ctx.Done():
		return relay.Blob{}, ctx.Err()
	case <-s.ctx.Done():
		return relay.Blob{}, relay.ErrUnavailable
	}
}

// Ack deletes blob seq, which this session delivered, from the device's
// inbox and from no other. On another broker's inbox it is sent without
// waiting for the home (an ack lost between brokers leaves the blob to
// come again next session) and returns nil.
func (s *EdgeSession) Ack(seq relay.Seq) error {
	if s.local != nil {
		return s.x.b.relay.store.Ack(s.device, seq)
	}
	body := wire.AppendSeqRanges(nil, []wire.SeqRange{{Lo: uint64(seq), Hi: uint64(seq)}})
	if r := s.x.b.cl.forward(s.d.home, relayMsg(ropAckEvent, body, rhSid, s.d.sid), nil); r != nil {
		return storeErr(r)
	}
	return nil
}

// Close ends the session; its home forgets it.
func (s *EdgeSession) Close() {
	if s.d == nil {
		return
	}
	s.once.Do(func() {
		s.d.cancel()
		cl := s.x.b.cl
		cl.dropSession(s.d)
		_ = cl.forward(s.d.home, relayMsg(ropEnd, nil, rhSid, s.d.sid), nil)
	})
}
