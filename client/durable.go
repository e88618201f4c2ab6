package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

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
	seq, err := strconv.ParseUint(string(a.Body()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("client: malformed push answer %q", a.Body())
	}
	return seq, nil
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
	once  sync.Once
	done  chan struct{} // closed when the session ends
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
	body, _ := json.Marshal(wire.DurableReceive{Device: dev.ID().String(), Public: dev.Public().Bytes(), Sig: dev.ProveReceive(c.nonce)})
	a, err := c.call(ctx, nil, controlMessage(wire.CmdDurableReceive, string(body)), c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		s.end()
		return nil, err
	}
	return s, nil
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
// it returns ErrDurableSession, even with blobs still buffered: what was
// not acked comes again on the next session.
func (s *DurableSession) Next(ctx context.Context) (DurableBlob, error) {
	select {
	case <-s.done:
		return DurableBlob{}, ErrDurableSession
	default:
	}
	select {
	case b := <-s.blobs:
		return b, nil
	case <-s.done:
		return DurableBlob{}, ErrDurableSession
	case <-s.c.done: // the session ends with the client
		s.end()
		return DurableBlob{}, ErrDurableSession
	case <-ctx.Done():
		return DurableBlob{}, ctx.Err()
	}
}

// Ack deletes a delivered blob from the device's inbox at the relay.
func (s *DurableSession) Ack(ctx context.Context, seq uint64) error {
	a, err := s.c.call(ctx, nil, controlMessage(wire.CmdDurableAck, strconv.FormatUint(seq, 10)), s.c.deadline(ctx))
	return controlResult(a, err)
}

// Close ends the session on this side: what the relay still sends is not
// kept, and comes again on the next session.
func (s *DurableSession) Close() { s.end() }

func (s *DurableSession) end() {
	s.once.Do(func() {
		close(s.done)
		s.c.durable.CompareAndSwap(s, nil)
	})
}

// DurableInbox asks the relay what it holds for dev (proving dev's key,
// as DurableReceive does): the blobs not yet acked, and their bytes.
func (c *Client) DurableInbox(ctx context.Context, dev *seal.Identity) (wire.DurableInbox, error) {
	body, _ := json.Marshal(wire.DurableReceive{Device: dev.ID().String(), Public: dev.Public().Bytes(), Sig: dev.ProveReceive(c.nonce)})
	a, err := c.call(ctx, nil, controlMessage(wire.CmdDurableInbox, string(body)), c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		return wire.DurableInbox{}, err
	}
	var in wire.DurableInbox
	if err := json.Unmarshal(a.Body(), &in); err != nil {
		return wire.DurableInbox{}, fmt.Errorf("client: malformed inbox answer: %w", err)
	}
	return in, nil
}
