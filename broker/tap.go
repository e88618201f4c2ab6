package broker

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// Tapping (docs/operations.md#busbar-tap): a connection whose principal
// holds the tap permission asks for a copy of the messages the broker
// routes, as bus.tap.event events. The reader of each sender makes the
// copies before it routes the message; with no tapper that costs one
// atomic load per frame. A copy is shown to a tapper only when its
// principal may tap the channel and could have received the message
// itself: subscribe for a stream, send or publication, handle for a
// request, request for a response. A tapper that cannot keep up loses
// copies, never slows the bus: each lost copy is counted, and the next
// event it gets says how many it missed.

// tapper is one connection's tap.
type tapper struct {
	c        *conn
	channels []auth.Pattern // empty: every channel
	nodes    []string       // empty: every node; else the sender's or the target's node name
	missed   atomic.Uint64  // copies lost since the last one queued
}

// taps holds the tappers. Readers load the list without a lock; it is
// replaced, never changed in place.
type taps struct {
	mu     sync.Mutex // serialises changes of list
	list   atomic.Pointer[[]*tapper]
	missed atomic.Int64 // copies lost by any tapper, for the metrics
}

// TapMissed is the number of tap copies lost because a tapper's queue
// was full.
func (b *Broker) TapMissed() int64 { return b.taps.missed.Load() }

// Tappers is the number of connections tapping.
func (b *Broker) Tappers() int {
	if l := b.taps.list.Load(); l != nil {
		return len(*l)
	}
	return 0
}

// set installs (or replaces) c's tap.
func (t *taps) set(tp *tapper) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var next []*tapper
	if l := t.list.Load(); l != nil {
		next = slices.DeleteFunc(slices.Clone(*l), func(o *tapper) bool { return o.c == tp.c })
	}
	next = append(next, tp)
	t.list.Store(&next)
}

// remove ends c's tap, if it has one.
func (t *taps) remove(c *conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.list.Load()
	if l == nil || !slices.ContainsFunc(*l, func(o *tapper) bool { return o.c == c }) {
		return false
	}
	next := slices.DeleteFunc(slices.Clone(*l), func(o *tapper) bool { return o.c == c })
	if len(next) == 0 {
		t.list.Store(nil)
	} else {
		t.list.Store(&next)
	}
	return true
}

// tapControl runs bus.tap and bus.untap.
func (b *Broker) tapControl(c *conn, m *wire.Message, s *subject) *refusal {
	if s.command == wire.CmdUntap {
		b.taps.remove(c)
		b.reply(c, *s, nil)
		return nil
	}
	if c.perms != nil && len(c.perms.Tap) == 0 {
		return rejectf("not permitted to tap: the principal has no tap permission; give it a \"tap\" list in principals.json (busbar principal add --tap, or edit the file) and send the broker SIGHUP (docs/operations.md#busbar-tap)")
	}
	var req wire.TapRequest
	if body := m.Body(); len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return rejectf("tap request: %v", err)
		}
	}
	if len(req.Channels) > wire.MaxTapPatterns || len(req.Nodes) > wire.MaxTapPatterns {
		return rejectf("a tap takes at most %d channel patterns and %d nodes", wire.MaxTapPatterns, wire.MaxTapPatterns)
	}
	tp := &tapper{c: c, nodes: req.Nodes}
	for _, p := range req.Channels {
		pat, err := auth.ParsePattern(p)
		if err != nil {
			return rejectf("tap pattern %q: %v", p, err)
		}
		tp.channels = append(tp.channels, pat)
	}
	b.taps.set(tp)
	b.reply(c, *s, nil)
	return nil
}

// tapKind maps a routed message to its kind's name and the action a
// tapper needs to have received it.
func tapKind(v *hotpath.View) (string, auth.Action) {
	switch v.Value(wire.HeaderType) {
	case wire.TypeStream:
		return "stream", auth.ActionSubscribe
	case wire.TypeEvent:
		if _, ok := v.Get(wire.HeaderTo); ok {
			return "send", auth.ActionSubscribe
		}
		return "publish", auth.ActionSubscribe
	case wire.TypeRequest:
		return "request", auth.ActionHandle
	case wire.TypeResponse:
		return "response", auth.ActionRequest
	}
	return "", ""
}

// tap queues a copy of the message v, sent from the address from, for
// every tapper that may see it. It runs on its sender's reader (or a
// link's), before the message is routed.
func (b *Broker) tap(from string, v *hotpath.View, channel string) {
	l := b.taps.list.Load()
	if l == nil {
		return
	}
	kind, action := tapKind(v)
	if kind == "" {
		return
	}
	to := v.Value(wire.HeaderTo)
	var ev *wire.TapEvent // made once, for the first tapper that sees it
	for _, tp := range *l {
		if !tp.sees(action, channel, from, to) {
			continue
		}
		if ev == nil {
			ev = tapEvent(v, kind, from, to, channel)
		}
		b.sendTap(tp, *ev)
	}
}

// sees reports whether tp is shown a message of action on channel between
// from and to.
func (tp *tapper) sees(action auth.Action, channel, from, to string) bool {
	if !tp.c.allows(auth.ActionTap, channel) || !tp.c.allows(action, channel) {
		return false
	}
	if len(tp.channels) > 0 && !slices.ContainsFunc(tp.channels, func(p auth.Pattern) bool { return p.Match(channel) }) {
		return false
	}
	if len(tp.nodes) == 0 {
		return true
	}
	fromNode, toNode := nodeOf(from), nodeOf(to)
	return slices.ContainsFunc(tp.nodes, func(n string) bool { return n == fromNode || n == toNode })
}

// nodeOf is the node name of an address ("alpha.bus" → "alpha"); a bare
// name is itself.
func nodeOf(addr string) string { return strings.TrimSuffix(addr, ".bus") }

// tapEvent copies what a tapper is shown of v; nothing of it aliases the
// read buffer.
func tapEvent(v *hotpath.View, kind, from, to, channel string) *wire.TapEvent {
	body := v.Body()
	ev := &wire.TapEvent{Time: time.Now(), Kind: kind, ID: strings.Clone(v.Value(wire.HeaderID)), From: strings.Clone(from),
		To: strings.Clone(to), Channel: strings.Clone(channel), Size: len(body)}
	preview := body
	if len(preview) > wire.TapPreviewBytes {
		preview, ev.Truncated = preview[:wire.TapPreviewBytes], true
	}
	ev.Preview = slices.Clone(preview)
	if m, err := v.Message(); err == nil {
		for k, val := range m.Headers() {
			switch k {
			case wire.HeaderType, wire.HeaderID, wire.HeaderFrom, wire.HeaderTo, wire.HeaderCommand:
				continue
			}
			if ev.Headers == nil {
				ev.Headers = map[string]string{}
			}
			if len(val) > wire.TapPreviewBytes {
				val = val[:wire.TapPreviewBytes]
			}
			ev.Headers[k] = val
		}
	}
	return ev
}

// sendTap queues ev for tp without waiting; a full queue loses it.
func (b *Broker) sendTap(tp *tapper, ev wire.TapEvent) {
	ev.Missed = tp.missed.Load()
	body, err := wire.JSON(ev)
	if err != nil {
		return // cannot happen: every field encodes
	}
	if !tp.c.out.Enqueue(wire.New(wire.TypeEvent, wire.CmdTapEvent).WithBody(body), time.Time{}) {
		tp.missed.Add(1)
		b.taps.missed.Add(1)
		return
	}
	if ev.Missed > 0 {
		tp.missed.Add(^(ev.Missed - 1)) // subtract what this event reported
	}
}
