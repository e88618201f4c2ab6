package client

import (
	"context"
	"time"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// Loopback (docs/discovery.md#loopback): a request addressed to this client's own node
// (<node>.bus, <service>.<node>.bus, …) never goes over the wire — the
// broker would only send it back. It is handed to the local handler on the
// executor, never run on the caller's goroutine, so it keeps the
// asynchrony of a real hop, and its answer, error kinds and deadline are
// those of a remote request. The broker's permission checks do not apply:
// nothing leaves the process. A bare name is not loopback: the broker
// resolves it through the registry, where other nodes may announce it.

// isSelf reports whether target (as prepare normalised it) names this node.
func (c *Client) isSelf(target string) bool {
	t, err := wire.ParseTarget(target)
	return err == nil && t.Kind == wire.TargetAddress && t.Addr.Node == c.Node()
}

// localRequest runs m through this node's own handler and returns the
// response as the broker would have delivered it.
func (c *Client) localRequest(ctx context.Context, s *Scope, m *wire.Message) (*wire.Message, error) {
	deadline := c.deadline(ctx)
	if err := c.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, ErrScopeClosed
	}
	m.Set(wire.HeaderFrom, c.Addr())
	channel := m.Value(wire.HeaderCommand)
	c.mu.Lock()
	reg := c.handlers[channel]
	c.mu.Unlock()
	msg := newMessage(m, Request, hotpath.At(deadline))
	local := func(o outcome) *wire.Message {
		return replyMessage(msg.Channel(), msg.ID(), msg.From(), o).WithHeader(wire.HeaderFrom, c.Addr())
	}
	if reg == nil {
		return local(failed(wire.ResultNoHandler, wire.RCFailure, "no handler for "+channel+" on "+c.Node())), nil
	}
	answer := make(chan *wire.Message, 1)
	run := func() {
		if o, ok := c.runHandler(reg, msg); ok {
			answer <- local(o)
		}
	}
	if !c.execute(run) {
		return local(failed(wire.ResultOverload, wire.RCFailure, c.Node()+" dispatch queue is full")), nil
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case a := <-answer:
		return a, nil
	case <-ctx.Done():
		return nil, errDeadline
	case <-timer.C:
		return nil, errDeadline
	case <-s.done:
		return nil, ErrScopeClosed
	case <-c.done:
		return nil, c.Err()
	}
}
