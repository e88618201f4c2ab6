package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// Channel is a named channel seen from one scope: what a plugin uses to
// send and receive on it.
//
// Every method reports failure the same way:
//
//   - A call refused before anything is sent returns a plain error, as it
//     is: auth.ErrBadChannel (a malformed or reserved channel name),
//     wire.ErrBadAddress or wire.ErrCrossMesh (a malformed or missing
//     target), ErrPayloadTooLarge (over the broker's limit),
//     ErrScopeClosed (the scope is closed), or the client's Err (it has
//     ended: ErrClosed after Close, an error matching ErrDisconnect when
//     the connection was lost). Nothing left the process.
//   - What became of a message that was sent is said in its kind's own
//     terms: Send's Receipt (ACCEPTED … FAILED, including the outcomes
//     decided on this side: BACKPRESSURED by the client's own full queue,
//     TIMED_OUT, FAILED when the connection ends while it waits), and a
//     *RequestError for Request, Publish, Subscribe and Handle (what the
//     broker or a handler answered, or TIMEOUT, OVERLOAD, DISCONNECT for
//     the answer that never came). Emit has no answer: once queued it
//     succeeded.
//   - A scope closed while a call waits fails it with ErrScopeClosed.
//
// So errors.As(err, &*RequestError) is true exactly when the broker or a
// handler was asked, and errors.Is with the sentinels above tells the
// local refusals apart.
type Channel struct {
	s       *Scope
	name    string
	nameErr error // auth.ValidChannel(name), checked once: a name never changes
}

// Name is the channel's name.
func (ch *Channel) Name() string { return ch.name }

// usable is nil, or why the channel can start no work: the client ended
// (its Err) or the scope is closed.
func (ch *Channel) usable() error {
	if e := ch.s.c.end.Load(); e != nil && e.closed {
		return e.err
	}
	if ch.s.closed.Load() {
		return ErrScopeClosed
	}
	return nil
}

// check is what every call checks before anything is queued; its errors
// are the plain refusals of the Channel doc.
func (ch *Channel) check(payload []byte) error {
	if ch.nameErr != nil {
		return ch.nameErr
	}
	if n, limit := len(payload), ch.s.c.conn().welcome.MaxPayload; n > limit {
		return fmt.Errorf("%w: %d bytes exceeds the broker's limit of %d", ErrPayloadTooLarge, n, limit)
	}
	return ch.usable()
}

// noTarget refuses a send or request without a target.
func noTarget(what string) error {
	return &wire.AddressError{Reason: "a " + what + " needs a target (Publish reaches every node)"}
}

// prepare checks a call before anything is queued and builds its message.
// The payload is copied, so the caller may reuse it at once.
func (ch *Channel) prepare(typ, target string, payload []byte) (*wire.Message, error) {
	to, err := ch.target(target, payload)
	if err != nil {
		return nil, err
	}
	m := wire.New(typ, ch.name).WithHeader(wire.HeaderID, newID()).WithBody(payload)
	if to != "" {
		m.Set(wire.HeaderTo, to)
	}
	return m, nil
}

// target checks a call before anything is queued and returns its target
// in canonical form ("" for none).
func (ch *Channel) target(target string, payload []byte) (string, error) {
	if err := ch.check(payload); err != nil {
		return "", err
	}
	if target == "" {
		return "", nil
	}
	t, err := wire.ParseTarget(target)
	if err != nil {
		return "", err
	}
	if t.Kind == wire.TargetCrossMesh {
		return "", wire.ErrCrossMesh
	}
	return t.String(), nil
}

// Send sends an event to one node (target: a node name or address) and
// returns its receipt. The deadline (ctx's, else Options.DefaultTimeout)
// covers queueing, delivery and the receipt.
//
// The error is nil whenever there is a receipt, whatever its result. It is
// a plain refusal (see Channel) when nothing was sent, with a zero
// Receipt, or ErrScopeClosed when the scope closed while Send waited, with
// Receipt.ID naming the event, which may have been handled.
func (ch *Channel) Send(ctx context.Context, target string, payload []byte) (Receipt, error) {
	if target == "" {
		// An event without a target is a publication on the wire.
		return Receipt{}, noTarget("send")
	}
	m, err := ch.prepare(wire.TypeEvent, target, payload)
	if err != nil {
		return Receipt{}, err
	}
	id := m.Value(wire.HeaderID)
	c := ch.s.c
	a, err := c.call(ctx, ch.s, m, c.deadline(ctx))
	switch {
	case err == nil:
		return Receipt{ID: id, Result: wire.Result(a.Value(wire.HeaderResult)), Node: a.Value(wire.HeaderFrom)}, nil
	case errors.Is(err, ErrScopeClosed):
		return Receipt{ID: id}, err
	case errors.Is(err, errUnreachable): // never sent
		return Receipt{ID: id, Result: wire.TimedOut, Reason: err.Error()}, nil
	case errors.Is(err, errDeadline):
		return Receipt{ID: id, Result: wire.TimedOut, Node: m.Value(wire.HeaderTo)}, nil
	case errors.Is(err, errQueueFull):
		return Receipt{ID: id, Result: wire.Backpressured, Reason: err.Error()}, nil
	default: // the connection ended
		return Receipt{ID: id, Result: wire.Failed, Reason: err.Error()}, nil
	}
}

// Request sends a request to the target's handler for this channel and
// returns the reply, or a *RequestError (NO_HANDLER, OVERLOAD, TIMEOUT,
// DISCONNECT, REJECTED, HANDLER_FAILED), or a plain refusal when nothing
// was sent (see Channel). A timeout cannot prove the handler did not run.
func (ch *Channel) Request(ctx context.Context, target string, payload []byte) (*Message, error) {
	if target == "" {
		return nil, noTarget("request")
	}
	to, err := ch.target(target, payload)
	if err != nil {
		return nil, err
	}
	c := ch.s.c
	if !c.isSelf(to) {
		f := hotpath.Fields{Type: wire.TypeRequest, Command: ch.name, ID: newID(), To: to, TTL: true}
		return c.request(ctx, ch.s, &f, payload, c.deadline(ctx))
	}
	m := wire.New(wire.TypeRequest, ch.name).WithHeader(wire.HeaderID, newID()).WithHeader(wire.HeaderTo, to).WithBody(payload)
	a, err := c.localRequest(ctx, ch.s, m)
	if err != nil {
		return nil, callError(err)
	}
	if wire.ResponseRC(a).IsError() {
		return nil, requestError(a)
	}
	return newMessage(a, Reply, 0), nil
}

// callError maps why a call got no answer to a request error; a closed
// scope stays ErrScopeClosed.
func callError(err error) error {
	switch {
	case errors.Is(err, errUnreachable):
		return &RequestError{Kind: wire.ResultTimeout, RC: wire.RCFailure, Text: "not connected to a broker before the deadline (reconnecting); nothing was sent"}
	case errors.Is(err, errDeadline):
		return &RequestError{Kind: wire.ResultTimeout, RC: wire.RCFailure, Text: "no reply before the deadline"}
	case errors.Is(err, errQueueFull):
		return &RequestError{Kind: wire.ResultOverload, RC: wire.RCFailure, Text: err.Error()}
	case errors.Is(err, ErrScopeClosed):
		return err
	}
	return &RequestError{Kind: wire.ResultDisconnect, RC: wire.RCFailure, Text: err.Error()}
}

// Emit sends a stream message on the channel: an event for every node
// subscribed to it and permitted to receive it, with no answer at all —
// fire and forget, for telemetry and high-rate flows. It returns once the
// message is queued, waiting (up to ctx) while the outbound queue is full,
// so a fast producer is paced rather than dropping. ctx's deadline, if
// any, travels as the message's ttl; without one the broker's MaxTTL
// applies (Options.DefaultTimeout does not: Emit has no answer to wait for). Delivery is best
// effort: a full queue on the way drops the message, counted by the broker
// (Stats().Dropped) and the receiving node (Client.Dropped). Its errors
// are ctx's, or the plain refusals of the Channel doc.
func (ch *Channel) Emit(ctx context.Context, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err // done before it started, even if the queue has room
	}
	if err := ch.check(payload); err != nil {
		return err
	}
	// Encoded straight into the connection's pending batch, under its
	// queue's lock: no frame of its own, no copy by the writer, nothing
	// allocated. Without a ctx deadline a stream message carries no ttl
	// (the broker applies its MaxTTL): a clock read per message is not free.
	c := ch.s.c
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline {
		deadline = time.Time{}
	}
	var idb [36]byte
	id := appendID(idb[:0])
	size := hotpath.EventLen(wire.TypeStream, ch.name, len(id), len(payload), hasDeadline)
	// While the client is reconnecting Emit waits for the connection as it
	// waits for room; a message that never entered a queue is not lost to
	// a connection's end, so it goes on the next one.
	var stale *conn
	for {
		if err := c.awaitUp(ctx, ch.s, time.Time{}, stale); err != nil { // ctx bounds the wait
			if errors.Is(err, errUnreachable) {
				return cmp.Or(ctx.Err(), context.DeadlineExceeded)
			}
			return err
		}
		cn := c.cur.Load()
		if cn == nil {
			continue
		}
		b, err := cn.out.ReserveWait(ctx, size)
		if errors.Is(err, sendq.ErrClosed) {
			stale = cn
			continue
		}
		if err != nil {
			return err
		}
		var ttlOff int
		*b, ttlOff = hotpath.AppendEvent(*b, wire.TypeStream, ch.name, id, payload, hasDeadline)
		cn.out.Commit(ttlOff, deadline)
		return nil
	}
}

// Publish fans an event out to the broker and every connected node
// permitted to receive the channel, this node included, and returns one
// result per candidate. What the broker refuses (a permission; more than
// 256 candidate nodes, which refuses the publication whole) is a
// *RequestError matching ErrRejected; what the client refuses before
// sending is a plain error, with a zero PublishResult (see Channel).
func (ch *Channel) Publish(ctx context.Context, payload []byte) (PublishResult, error) {
	m, err := ch.prepare(wire.TypeEvent, "", payload)
	if err != nil {
		return PublishResult{}, err
	}
	id := m.Value(wire.HeaderID)
	c := ch.s.c
	a, err := c.call(ctx, ch.s, m, c.deadline(ctx))
	if err != nil {
		return PublishResult{ID: id}, callError(err)
	}
	if wire.ResponseRC(a).IsError() {
		return PublishResult{ID: id}, requestError(a)
	}
	res := PublishResult{ID: id}
	if err := json.Unmarshal(a.Body(), &res.Results); err != nil {
		return res, &RequestError{Kind: wire.ResultRejected, RC: wire.RCFailure, Text: "malformed publish result: " + err.Error()}
	}
	return res, nil
}
