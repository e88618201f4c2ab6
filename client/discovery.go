package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"busbar/wire"
)

// Discovery (docs/discovery.md): a node
// announces the services it hosts; the broker keeps the registry, so one
// Whois learns the world, and a watch follows it. Records live as long as
// the announcing connection: a node that closes, is replaced or misses its
// lease vanishes from the registry with a "down" event.

// ServiceWatchBuffer is how many registry events a ServiceWatch holds
// for a reader that is behind. One more ends the watch with
// ErrWatchOverflow: a watcher that missed an event no longer knows the
// registry and must watch again.
const ServiceWatchBuffer = 1024

// ErrWatchOverflow ends a watch whose reader fell ServiceWatchBuffer
// events behind.
var ErrWatchOverflow = errors.New("client: watch fell behind and was ended; watch again for a fresh snapshot")

// Announce tells the broker this node hosts a service; it returns the
// record as registered (address, instance id, provenance, collision
// flag). Announcing the same name again replaces the record. The client
// keeps the announcement and makes it again on every reconnect, until
// Withdraw or a refusal from the broker.
func (c *Client) Announce(ctx context.Context, a wire.Announcement) (wire.ServiceInfo, error) {
	if err := a.Check(); err != nil {
		return wire.ServiceInfo{}, &RequestError{Kind: wire.ResultRejected, RC: wire.RCFailure, Text: err.Error()}
	}
	body, err := wire.JSON(a)
	if err != nil {
		return wire.ServiceInfo{}, err
	}
	d := &c.discovery
	m := controlMessage(wire.CmdAnnounce, string(body))
	id, deadline := m.Value(wire.HeaderID), c.deadline(ctx)
	rec := &a
	p, err := c.startUnder(ctx, &d.mu, m, deadline, nil, func(*conn) { d.announced[a.Service] = rec })
	if err != nil {
		return wire.ServiceInfo{}, callError(err)
	}
	a2, err := c.await(ctx, p, id, deadline)
	if err := controlResult(a2, err); err != nil {
		if a2 != nil { // refused: nothing to make again
			d.mu.Lock()
			if d.announced[a.Service] == rec {
				delete(d.announced, a.Service)
			}
			d.mu.Unlock()
		}
		return wire.ServiceInfo{}, err
	}
	var info wire.ServiceInfo
	if err := json.Unmarshal(a2.Body(), &info); err != nil {
		return wire.ServiceInfo{}, fmt.Errorf("client: malformed announcement answer: %w", err)
	}
	return info, nil
}

// Withdraw removes this node's record of a service; a reconnect no
// longer makes it.
func (c *Client) Withdraw(ctx context.Context, service string) error {
	d := &c.discovery
	m := controlMessage(wire.CmdWithdraw, service)
	deadline := c.deadline(ctx)
	p, err := c.startUnder(ctx, &d.mu, m, deadline, nil, func(*conn) { delete(d.announced, service) })
	if err != nil {
		return callError(err)
	}
	a, err := c.await(ctx, p, m.Value(wire.HeaderID), deadline)
	return controlResult(a, err)
}

// Whois returns the live instances of service, or of every service when
// service is "", sorted by name then node: the whole registry in one
// round trip.
func (c *Client) Whois(ctx context.Context, service string) ([]wire.ServiceInfo, error) {
	a, err := c.call(ctx, nil, controlMessage(wire.CmdWhois, service), c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		return nil, err
	}
	var out []wire.ServiceInfo
	if err := json.Unmarshal(a.Body(), &out); err != nil {
		return nil, fmt.Errorf("client: malformed registry: %w", err)
	}
	return out, nil
}

// discovery is the client's part for registry watches. Its lock is its
// own: it is never held together with Client.mu or the state's locks
// (calls are registered with Client.register before mu is taken).
type discovery struct {
	c *Client // set once in Connect; read-only after

	// mu guards watches, announced, and every ServiceWatch's live flag,
	// cn, known and watchLife. bus.watch, bus.unwatch, bus.announce and
	// bus.withdraw are queued under it, so they leave in the order they
	// were decided.
	mu        sync.Mutex
	watches   map[*ServiceWatch]struct{}
	announced map[string]*wire.Announcement // by service: what a reconnect announces again
}

func (d *discovery) init(c *Client) {
	d.c = c
	d.watches = map[*ServiceWatch]struct{}{}
	d.announced = map[string]*wire.Announcement{}
}

// ServiceWatch follows the registry: Initial is the registry when the
// watch started, then Events delivers every change after it, once, in
// order (no gap, no duplicate). Across a reconnect it resyncs: from the
// new broker's registry it delivers a "down" for each record gone and an
// "up" (or "collision") for each record new or changed meanwhile.
type ServiceWatch struct {
	d       *discovery                  // set once; read-only after
	initial []wire.ServiceInfo          // set by the reader before the watch is live; read-only after
	events  chan wire.ServiceEvent      // sent to under d.mu, never blocking; closed by end
	live    bool                        // the reader installed the snapshot; guarded by d.mu
	cn      *conn                       // the connection its bus.watch went on; guarded by d.mu
	known   map[string]wire.ServiceInfo // the registry as delivered, by address; guarded by d.mu

	watchLife // guarded by d.mu
}

// watchLife is how a watch ends, shared by ServiceWatch and StateWatch:
// once, recording why, and letting go of its context. Its fields are
// guarded by mu, the lock of the watch's part of the client (discovery's
// or state's).
type watchLife struct {
	mu    *sync.Mutex // set once; read-only after
	ended bool        // end ran: the single flag that makes it run once
	err   error       // why it ended
	stop  func() bool // the context's AfterFunc
}

// Err is why the watch ended: nil after Close, the context's error,
// ErrWatchOverflow, ErrResync (a state watch), or the client's error.
func (l *watchLife) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// endOnce ends the watch the first time it is called: locked runs under
// mu to take the watch out of the client and close its channel.
func (l *watchLife) endOnce(why error, locked func()) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.err, l.ended = why, true
	stop := l.stop
	locked()
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// finishWatch waits for the answer to a watch request and then binds the
// watch to ctx. installed reports whether the reader took the snapshot;
// end ends the watch (on any failure, with nil).
func (c *Client) finishWatch(ctx context.Context, p *pending, id string, deadline time.Time, what string,
	installed func() bool, life *watchLife, end func(error)) error {
	a, err := c.await(ctx, p, id, deadline)
	if err := controlResult(a, err); err != nil {
		end(nil)
		return err
	}
	if !installed() {
		end(nil)
		return errors.New("client: malformed " + what)
	}
	stop := context.AfterFunc(ctx, func() { end(ctx.Err()) })
	life.mu.Lock()
	ended := life.ended
	if !ended {
		life.stop = stop
	}
	life.mu.Unlock()
	if ended {
		stop()
	}
	return nil
}

// WatchServices starts a watch. It ends when ctx is done, Close is called,
// the client closes, or the reader falls ServiceWatchBuffer events behind
// (Err then says ErrWatchOverflow).
func (c *Client) WatchServices(ctx context.Context) (*ServiceWatch, error) {
	d := &c.discovery
	w := &ServiceWatch{d: d, events: make(chan wire.ServiceEvent, ServiceWatchBuffer), watchLife: watchLife{mu: &d.mu}}
	m := controlMessage(wire.CmdWatch, "")
	id := m.Value(wire.HeaderID)
	deadline := c.deadline(ctx)
	// Activated by the reader as it reads the snapshot: events read before
	// it are in the snapshot, events read after it are not.
	p, err := c.startUnder(ctx, &d.mu, m, deadline, func(a *wire.Message) {
		var initial []wire.ServiceInfo
		if wire.ResponseRC(a).IsError() || json.Unmarshal(a.Body(), &initial) != nil {
			return
		}
		d.mu.Lock()
		w.initial, w.known, w.live = initial, byAddress(initial), true
		d.mu.Unlock()
	}, func(cn *conn) {
		w.cn = cn
		d.watches[w] = struct{}{}
	})
	if err != nil {
		w.end(nil)
		return nil, callError(err)
	}
	if err := c.finishWatch(ctx, p, id, deadline, "registry snapshot", func() bool { return w.initial != nil }, &w.watchLife, w.end); err != nil {
		return nil, err
	}
	return w, nil
}

// Initial is the registry when the watch started.
func (w *ServiceWatch) Initial() []wire.ServiceInfo { return w.initial }

// Events delivers registry changes; it is closed when the watch ends.
func (w *ServiceWatch) Events() <-chan wire.ServiceEvent { return w.events }

// Close ends the watch.
func (w *ServiceWatch) Close() { w.end(nil) }

// end stops the watch once: no more events, the channel closes, and the
// broker stops sending events when this was the client's last watch.
func (w *ServiceWatch) end(why error) {
	w.endOnce(why, func() {
		d := w.d
		delete(d.watches, w)
		if cn := d.c.cur.Load(); len(d.watches) == 0 && cn != nil && !d.c.closing() {
			// Under d.mu, so a watch started after this is queued after it.
			// A bus.unwatch the full queue refuses is dropped, counted: the
			// broker then keeps sending events no watch takes (Stats).
			d.c.queueOrCount(cn, controlMessage(wire.CmdUnwatch, ""), d.c.deadline(context.Background()), &d.c.drops.withdrawals)
		}
		close(w.events)
	})
}

// serviceEvent hands a bus.service event to every live watch (on the
// reader: it never blocks).
func (d *discovery) serviceEvent(m *wire.Message) {
	var ev wire.ServiceEvent
	if err := json.Unmarshal(m.Body(), &ev); err != nil {
		d.c.log.Warn("malformed registry event", "err", err)
		return
	}
	if ev.Op == wire.ServiceLost {
		// The broker dropped events for this client and stopped sending
		// them: the watches that were live then no longer know the registry.
		d.mu.Lock()
		var stale []*ServiceWatch
		for w := range d.watches {
			if w.live {
				stale = append(stale, w)
			}
		}
		d.mu.Unlock()
		for _, w := range stale {
			w.end(ErrWatchOverflow)
		}
		return
	}
	var behind []*ServiceWatch
	d.mu.Lock()
	for w := range d.watches {
		if !w.live {
			continue
		}
		select {
		case w.events <- ev:
			w.follow(ev)
		default:
			behind = append(behind, w)
		}
	}
	d.mu.Unlock()
	for _, w := range behind {
		w.end(ErrWatchOverflow)
	}
}

// endAll ends every watch when the client closes.
func (d *discovery) endAll(why error) {
	d.mu.Lock()
	ws := make([]*ServiceWatch, 0, len(d.watches))
	for w := range d.watches {
		ws = append(ws, w)
	}
	d.mu.Unlock()
	for _, w := range ws {
		w.end(why)
	}
}

// byAddress indexes records by address.
func byAddress(list []wire.ServiceInfo) map[string]wire.ServiceInfo {
	m := make(map[string]wire.ServiceInfo, len(list))
	for _, s := range list {
		m[s.Address] = s
	}
	return m
}

// follow keeps known as the watcher has been told (d.mu held).
func (w *ServiceWatch) follow(ev wire.ServiceEvent) {
	if ev.Op == wire.ServiceDown {
		delete(w.known, ev.Service.Address)
		return
	}
	w.known[ev.Service.Address] = ev.Service
}

// resynced takes a reconnect's registry snapshot on the reader: it
// delivers what changed since the watcher last heard, then the watch
// follows the new connection's events.
func (w *ServiceWatch) resynced(a *wire.Message) {
	var snap []wire.ServiceInfo
	if wire.ResponseRC(a).IsError() {
		return // the verdict ends the watch
	}
	if json.Unmarshal(a.Body(), &snap) != nil {
		w.end(fmt.Errorf("%w: malformed registry snapshot", ErrResync))
		return
	}
	d := w.d
	d.mu.Lock()
	if w.ended {
		d.mu.Unlock()
		return
	}
	now := byAddress(snap)
	var evs []wire.ServiceEvent
	for _, addr := range slices.Sorted(maps.Keys(w.known)) {
		if _, ok := now[addr]; !ok {
			evs = append(evs, wire.ServiceEvent{Op: wire.ServiceDown, Service: w.known[addr]})
		}
	}
	for _, s := range snap {
		old, ok := w.known[s.Address]
		switch {
		case ok && reflect.DeepEqual(old, s):
		case s.Collision && !old.Collision:
			evs = append(evs, wire.ServiceEvent{Op: wire.ServiceCollision, Service: s})
		default:
			evs = append(evs, wire.ServiceEvent{Op: wire.ServiceUp, Service: s})
		}
	}
	w.known, w.live = now, true
	behind := false
	for _, ev := range evs {
		select {
		case w.events <- ev:
		default:
			behind = true
		}
		if behind {
			break
		}
	}
	d.mu.Unlock()
	if behind {
		w.end(ErrWatchOverflow)
	}
}

// restore re-makes the announcements on cn and resyncs the watches bound
// to an older connection (the supervisor, during a reconnect).
func (d *discovery) restore(cn *conn) []restoreCall {
	c := d.c
	d.mu.Lock()
	var calls []restoreCall
	for _, name := range slices.Sorted(maps.Keys(d.announced)) {
		body, err := wire.JSON(d.announced[name])
		if err != nil {
			continue
		}
		if p, id, ok := c.restoreOn(cn, wire.CmdAnnounce, string(body), nil); ok {
			calls = append(calls, restoreCall{p: p, id: id, what: "announce " + name, verdict: func(error) {}})
		}
	}
	var unqueued []func(error)
	for w := range d.watches {
		if w.cn == cn {
			continue // started on cn meanwhile
		}
		w.cn, w.live = cn, false
		p, id, ok := c.restoreOn(cn, wire.CmdWatch, "", w.resynced)
		switch {
		case ok:
			calls = append(calls, resyncCall(p, id, "watch services", w.end))
		case !cn.out.Closing(): // else lost meanwhile: the next reconnect resyncs it
			unqueued = append(unqueued, w.end)
		}
	}
	d.mu.Unlock()
	endUnqueued(unqueued)
	return calls
}
