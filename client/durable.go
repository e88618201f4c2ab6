package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"busbar/seal"
	"busbar/wire"
)

// The relay, as a device uses it over its client connection: push a
// sealed blob, receive its own inbox, ack what it handled
// (docs/durable.md#the-relay-on-the-broker-connection). Package durable
// builds the outbox and the recipient on these calls.

// ErrDurableSession: the receive session ended (the connection closed,
// Close was called, or the relay broke the delivery window).
var ErrDurableSession = errors.New("client: durable receive session ended")

// ErrDurableTakenOver: the relay ended the receive session because a
// newer session of the same device opened (another process of the device,
// here or elsewhere). It matches ErrDurableSession too.
var ErrDurableTakenOver = fmt.Errorf("%w: a newer receive session of the same device took over", ErrDurableSession)

// DurablePush stores a sealed blob on the relay and returns its sequence
// in the recipient's inbox once the relay has it on disk. A refusal is a
// *RequestError whose Kind is the relay's code (TOO_LARGE, MALFORMED,
// INBOX_FULL, RATE_LIMITED, UNAVAILABLE, INTERNAL, or OVERLOAD);
// DurablePermanent tells the permanent ones.
func (c *Client) DurablePush(ctx context.Context, blob []byte) (uint64, error) {
	m := wire.New(wire.TypeRequest, wire.CmdDurablePush).WithHeader(wire.HeaderID, newID()).WithBody(blob)
	a, err := c.call(ctx, nil, m, c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		return 0, err
	}
	return parsePushAnswer(a)
}

// parsePushAnswer reads the sequence a push's answer carries.
func parsePushAnswer(a *wire.Message) (uint64, error) {
	seq, err := strconv.ParseUint(string(a.Body()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("client: malformed push answer %q", a.Body())
	}
	return seq, nil
}

// DurablePipeWindow bounds the pushes a DurablePipe keeps outstanding,
// below the broker's default limit of open calls per connection (1,024):
// enough to fill the relay's group commits, which take what arrived
// during the previous fsync.
const DurablePipeWindow = 256

// ErrDurablePipeFull: Send on a DurablePipe holding DurablePipeWindow
// pushes without answers; take one with Next first.
var ErrDurablePipeFull = errors.New("client: durable pipe full; take an answer with Next first")

// DurablePipe pushes sealed blobs over the client's connection without
// waiting for each answer: Send queues a push, Next returns the answers in
// the order the pushes were sent. The relay stores the blobs in that order
// and answers each once the fsync covering it is done, so one sender fills
// a group commit alone.
//
// Order holds across refusals: the relay refuses every push of the pipe
// behind one it refused temporarily, with the same code
// (wire.HeaderPipelined). A sender resends from the first refused push
// once it has taken every answer (Len is 0): a push sent with nothing
// outstanding starts a new pipeline. A blob refused permanently
// (TOO_LARGE, MALFORMED) does not stop the ones behind it.
//
// A DurablePipe is used by one goroutine at a time, and a connection
// carries one pipe at a time (the relay tracks one pipeline per
// connection); DurablePush beside it is independent.
type DurablePipe struct {
	c     *Client
	calls []pipedPush // sent, answers not yet taken; oldest first
}

type pipedPush struct {
	id       string
	p        *pending
	deadline time.Time
}

// DurablePipe returns a new, empty pipe on the client's connection.
func (c *Client) DurablePipe() *DurablePipe { return &DurablePipe{c: c} }

// Len is how many pushes were sent and their answers not yet taken.
func (p *DurablePipe) Len() int { return len(p.calls) }

// Send queues a push of blob (which it does not keep) and returns without
// waiting for the answer; ctx's deadline, or the client's default
// timeout, bounds the wait for it in Next. It fails with
// ErrDurablePipeFull when DurablePipeWindow answers are not taken, and
// when the connection's outbound queue is full or closed.
func (p *DurablePipe) Send(ctx context.Context, blob []byte) error {
	if len(p.calls) >= DurablePipeWindow {
		return ErrDurablePipeFull
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	id := newID()
	mark := wire.PipelineNext
	if len(p.calls) == 0 {
		mark = wire.PipelineFirst
	}
	m := wire.New(wire.TypeRequest, wire.CmdDurablePush).WithHeader(wire.HeaderID, id).
		WithHeader(wire.HeaderPipelined, mark).WithBody(blob)
	pend, err := p.c.register(nil, id, nil)
	if errors.Is(err, errNotConnected) {
		return fmt.Errorf("%w: reconnecting", ErrDisconnect)
	}
	if err != nil {
		return err
	}
	// A pipeline lives on one connection (the relay keeps its refusals
	// per connection): pushes behind ones sent on a lost connection wait
	// until those answers are taken, so none overtakes them.
	if len(p.calls) > 0 && p.calls[0].p.cn != pend.cn {
		p.c.forget(id)
		return fmt.Errorf("%w: the pipe's connection was lost; take its answers with Next, then send again", ErrDisconnect)
	}
	deadline := p.c.deadline(ctx)
	// Queued, never written through: the writer sends what the pipe
	// queued meanwhile in one write.
	if !pend.cn.out.Enqueue(m, deadline) {
		p.c.forget(id)
		return errQueueFull
	}
	p.calls = append(p.calls, pipedPush{id: id, p: pend, deadline: deadline})
	return nil
}

// Next waits for the answer to the oldest push not yet taken and returns
// the blob's sequence in its recipient's inbox, or the refusal as
// DurablePush does. Once Next returned, that push is no longer the
// pipe's, whatever the error (a timeout leaves its fate unknown, like any
// lost answer: push it again, the recipient's dedup drops a copy).
func (p *DurablePipe) Next(ctx context.Context) (uint64, error) {
	if len(p.calls) == 0 {
		return 0, errors.New("client: durable pipe empty")
	}
	call := p.calls[0]
	p.calls[0] = pipedPush{}
	p.calls = p.calls[1:]
	if len(p.calls) == 0 {
		p.calls = p.calls[:0:0] // let the backing array go
	}
	a, err := p.c.await(ctx, call.p, call.id, call.deadline)
	if err := controlResult(a, err); err != nil {
		return 0, err
	}
	return parsePushAnswer(a)
}

// DurablePushed is the outcome of one push of DurablePushAll: the blob's
// sequence, or why it is not stored.
type DurablePushed struct {
	Seq uint64
	Err error
}

// DurablePushAll pushes blobs, pipelined (at most DurablePipeWindow
// outstanding), and returns each one's outcome in order. Behind a blob
// refused temporarily, the others are refused too (see DurablePipe).
func (c *Client) DurablePushAll(ctx context.Context, blobs [][]byte) []DurablePushed {
	out := make([]DurablePushed, len(blobs))
	p := c.DurablePipe()
	taken := 0
	take := func() {
		out[taken].Seq, out[taken].Err = p.Next(ctx)
		taken++
	}
	for i, b := range blobs {
		if p.Len() == DurablePipeWindow {
			take()
		}
		if err := p.Send(ctx, b); err != nil {
			for ; p.Len() > 0; take() {
			}
			for j := i; j < len(blobs); j++ {
				out[j].Err = err
			}
			return out
		}
	}
	for p.Len() > 0 {
		take()
	}
	return out
}

// DurablePermanent reports whether err is a push refusal that retrying
// cannot cure: the blob is too large or malformed.
func DurablePermanent(err error) bool {
	var re *RequestError
	return errors.As(err, &re) && (re.Kind == wire.ResultTooLarge || re.Kind == wire.ResultMalformed)
}

// DurableBlob is one blob a receive session delivered.
type DurableBlob struct {
	Seq  uint64
	Blob []byte
}

// DurableSession is this client's receive session for one device: the
// device's inbox in arrival order, each blob once; Ack deletes one. A
// client has at most one: a new DurableReceive ends the older session.
type DurableSession struct {
	c     *Client
	blobs chan DurableBlob // filled by the reader; the relay's window bounds it
	// opened is the connection and request id the session was asked on:
	// a bus.durable.ended is about this session only if both match.
	opened atomic.Pointer[sessionOrigin]
	once   sync.Once
	cause  error         // why it ended; written once, before done is closed
	done   chan struct{} // closed when the session ends
}

type sessionOrigin struct {
	cn *conn
	id string
}

// DurableReceive opens the receive session of dev on this connection,
// proving to the relay that it holds dev's key. A newer session of the
// same device (from anywhere) ends this one at the relay.
func (c *Client) DurableReceive(ctx context.Context, dev *seal.Identity) (*DurableSession, error) {
	s := &DurableSession{c: c, blobs: make(chan DurableBlob, wire.DurableWindow), done: make(chan struct{})}
	// Registered before asking, so no delivery that follows the answer
	// finds no session. It replaces an older session of this client,
	// which ends (the relay ends it too).
	if old := c.durable.Swap(s); old != nil {
		old.end()
	}
	a, err := c.callOn(ctx, nil, func(cn *conn) *wire.Message {
		m := controlMessage(wire.CmdDurableReceive, receiveProof(dev, cn))
		s.opened.Store(&sessionOrigin{cn: cn, id: m.Value(wire.HeaderID)})
		return m
	}, c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		s.end()
		return nil, err
	}
	return s, nil
}

// durableEnded takes the relay's word that a session ended (the
// reader's): the session asked on cn with that id ends with the reason.
func (c *Client) durableEnded(cn *conn, m *wire.Message) {
	s := c.durable.Load()
	if s == nil {
		return
	}
	if o := s.opened.Load(); o == nil || o.cn != cn || o.id != m.Value(wire.HeaderID) {
		return // an older session's, told late
	}
	var why wire.DurableEnded
	_ = json.Unmarshal(m.Body(), &why)
	if why.Reason == wire.DurableEndedTakeover {
		s.endWith(ErrDurableTakenOver)
		return
	}
	s.endWith(fmt.Errorf("%w: %s", ErrDurableSession, why.Reason))
}

// durableDeliver hands a delivered blob to the session (the reader's).
func (c *Client) durableDeliver(m *wire.Message) {
	s := c.durable.Load()
	if s == nil {
		return // closed: the relay sends it again on the next session
	}
	seq, err := strconv.ParseUint(m.Value(wire.HeaderID), 10, 64)
	if err != nil {
		return
	}
	select {
	case s.blobs <- DurableBlob{Seq: seq, Blob: m.Body()}:
	default: // the relay broke its window: start again from what is not acked
		c.log.Warn("durable delivery over the window; ending the session", "seq", seq)
		s.end()
	}
}

// Next returns the next blob, in arrival order. Once the session ended
// it returns why — ErrDurableSession, or ErrDurableTakenOver when a newer
// session of the device took over — even with blobs still buffered: what
// was not acked comes again on the next session.
func (s *DurableSession) Next(ctx context.Context) (DurableBlob, error) {
	select {
	case <-s.done:
		return DurableBlob{}, s.cause
	default:
	}
	select {
	case b := <-s.blobs:
		return b, nil
	case <-s.done:
		return DurableBlob{}, s.cause
	case <-s.c.done: // the session ends with the client
		s.end()
		return DurableBlob{}, s.cause
	case <-ctx.Done():
		return DurableBlob{}, ctx.Err()
	}
}

// Ack deletes a delivered blob from the device's inbox at the relay. It
// goes on the session's connection only: once that is lost (or the
// session ended) it fails with the session's error, and the blob comes
// again on the next session, as the seed's crash points say.
func (s *DurableSession) Ack(ctx context.Context, seq uint64) error {
	return s.call(ctx, controlMessage(wire.CmdDurableAck, strconv.FormatUint(seq, 10)))
}

// call sends a control request on the session's connection and waits
// for its answer. An ack sent on a newer connection would find no session
// there (the relay refuses it), and never on the one that delivered.
func (s *DurableSession) call(ctx context.Context, m *wire.Message) error {
	cn, err := s.conn()
	if err != nil {
		return err
	}
	id, deadline := m.Value(wire.HeaderID), s.c.deadline(ctx)
	p, err := s.c.registerOn(cn, id, nil, nil)
	if err != nil {
		return s.lost(err)
	}
	if !cn.out.Enqueue(m, deadline) {
		s.c.forget(id)
		if cn.out.Closing() {
			return s.lost(errNotConnected)
		}
		return callError(errQueueFull)
	}
	a, err := s.c.await(ctx, p, id, deadline)
	return controlResult(a, err)
}

// conn is the connection the session was opened on, unless it ended.
func (s *DurableSession) conn() (*conn, error) {
	select {
	case <-s.done:
		return nil, s.cause
	default:
	}
	o := s.opened.Load()
	if o == nil {
		return nil, ErrDurableSession
	}
	return o.cn, nil
}

// lost is the error of a call the session's connection could not carry.
func (s *DurableSession) lost(why error) error {
	if errors.Is(why, errNotConnected) {
		return fmt.Errorf("%w: its connection was lost", ErrDurableSession)
	}
	return callError(why)
}

// AckAll deletes delivered blobs from the device's inbox at the relay:
// one ack per MaxAckRanges runs of consecutive sequences, so a batch of
// handled blobs costs one round trip. seqs may come in any order.
func (s *DurableSession) AckAll(ctx context.Context, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(seqs)))
	ranges := wire.SeqRanges(sorted)
	for len(ranges) > 0 {
		n := min(len(ranges), wire.MaxAckRanges)
		body := string(wire.AppendSeqRanges(nil, ranges[:n]))
		ranges = ranges[n:]
		if err := s.call(ctx, controlMessage(wire.CmdDurableAck, body)); err != nil {
			return err
		}
	}
	return nil
}

// AckAllNoWait is AckAll without waiting for the relay: the acks go as
// events, which the relay does not answer, so the recipient's next blobs
// are not held up by a round trip. Its error says only that the acks
// could not be queued (the connection's queue is full or closed); an ack
// the relay refuses (say, of a blob already acked) is not reported.
func (s *DurableSession) AckAllNoWait(seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	ranges := wire.SeqRanges(slices.Compact(slices.Sorted(slices.Values(seqs))))
	for len(ranges) > 0 {
		n := min(len(ranges), wire.MaxAckRanges)
		m := wire.New(wire.TypeEvent, wire.CmdDurableAck).WithBody(wire.AppendSeqRanges(nil, ranges[:n]))
		ranges = ranges[n:]
		cn, err := s.conn()
		if err != nil {
			return err
		}
		if cn != s.c.cur.Load() {
			return s.lost(errNotConnected)
		}
		if !cn.out.Enqueue(m, time.Time{}) {
			return errQueueFull
		}
	}
	return nil
}

// Close ends the session on this side: what the relay still sends is not
// kept, and comes again on the next session.
func (s *DurableSession) Close() { s.end() }

func (s *DurableSession) end() { s.endWith(ErrDurableSession) }

func (s *DurableSession) endWith(cause error) {
	s.once.Do(func() {
		s.cause = cause
		close(s.done)
		s.c.durable.CompareAndSwap(s, nil)
	})
}

// DurableInbox asks the relay what it holds for dev (proving dev's key,
// as DurableReceive does): the blobs not yet acked, and their bytes.
func (c *Client) DurableInbox(ctx context.Context, dev *seal.Identity) (wire.DurableInbox, error) {
	a, err := c.callOn(ctx, nil, func(cn *conn) *wire.Message {
		return controlMessage(wire.CmdDurableInbox, receiveProof(dev, cn))
	}, c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		return wire.DurableInbox{}, err
	}
	var in wire.DurableInbox
	if err := json.Unmarshal(a.Body(), &in); err != nil {
		return wire.DurableInbox{}, fmt.Errorf("client: malformed inbox answer: %w", err)
	}
	return in, nil
}

// receiveProof is the body of a receive or inbox call on cn: dev's keys
// and its signature of cn's nonce, so the proof is good on that
// connection only.
func receiveProof(dev *seal.Identity, cn *conn) string {
	body, _ := json.Marshal(wire.DurableReceive{Device: dev.ID().String(), Public: dev.Public().Bytes(), Sig: dev.ProveReceive(cn.nonce)})
	return string(body)
}
