package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"

	"busbar/wire"
)

// TapBuffer is how many tap events a Tap holds for a reader that is
// behind; past it the client drops them and counts them in the next
// event's Missed, as the broker does for a queue that is full.
const TapBuffer = 1024

// ErrTapEnded is what Tap.Next returns once the tap ended: Close was
// called, the connection it ran on was lost (a tap does not survive a
// reconnect: the broker forgets it), or the client closed.
var ErrTapEnded = errors.New("client: tap ended")

// Tap is a live copy of the traffic the broker routes (docs/operations.md#busbar-tap).
type Tap struct {
	c      *Client
	cn     atomic.Pointer[conn] // the connection the broker keeps the tap for
	events chan wire.TapEvent
	missed uint64 // events dropped here since the last one buffered; owned by the reader
	closed chan struct{}
	once   atomicOnce
}

// atomicOnce runs a close once without a lock.
type atomicOnce struct{ done atomic.Bool }

func (o *atomicOnce) do(f func()) {
	if o.done.CompareAndSwap(false, true) {
		f()
	}
}

// Tap asks the broker for a copy of every message it routes that f
// matches and the client's principal may see (it needs the tap
// permission). One tap per client: a second call replaces the first.
func (c *Client) Tap(ctx context.Context, f wire.TapRequest) (*Tap, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	t := &Tap{c: c, events: make(chan wire.TapEvent, TapBuffer), closed: make(chan struct{})}
	// Installed before the request leaves: the first events may come
	// right behind the answer.
	if old := c.tap.Swap(t); old != nil {
		old.end()
	}
	a, err := c.callOn(ctx, nil, func(cn *conn) *wire.Message {
		t.cn.Store(cn)
		return controlMessage(wire.CmdTap, string(body))
	}, c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		c.tap.CompareAndSwap(t, nil)
		t.end()
		return nil, err
	}
	return t, nil
}

// tapEvent hands one bus.tap.event to the tap, without blocking the
// reader.
func (c *Client) tapEvent(cn *conn, m *wire.Message) {
	t := c.tap.Load()
	if t == nil || t.cn.Load() != cn {
		return
	}
	var ev wire.TapEvent
	if json.Unmarshal(m.Body(), &ev) != nil {
		return
	}
	ev.Missed += t.missed // the broker's losses, then ours
	select {
	case t.events <- ev:
		t.missed = 0
	default:
		t.missed = ev.Missed + 1
	}
}

// Next returns the next event, waiting for it until ctx ends. After the
// tap ended it returns ErrTapEnded once the buffered events are read.
func (t *Tap) Next(ctx context.Context) (wire.TapEvent, error) {
	select {
	case ev := <-t.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-t.events:
		return ev, nil
	case <-ctx.Done():
		return wire.TapEvent{}, ctx.Err()
	case <-t.closed:
	case <-t.cn.Load().done:
	case <-t.c.done:
	}
	return wire.TapEvent{}, ErrTapEnded
}

// Close ends the tap; the broker stops copying for this client.
func (t *Tap) Close(ctx context.Context) error {
	if !t.c.tap.CompareAndSwap(t, nil) {
		return nil // replaced or already closed
	}
	t.end()
	a, err := t.c.call(ctx, nil, controlMessage(wire.CmdUntap, ""), t.c.deadline(ctx))
	return controlResult(a, err)
}

func (t *Tap) end() { t.once.do(func() { close(t.closed) }) }
