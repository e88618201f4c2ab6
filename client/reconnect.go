package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"busbar/wire"
)

// Reconnecting (docs/client.md#reconnecting). The supervisor goroutine
// owns the connection's life: it waits for the live connection to end,
// then either ends the client or dials again — round the server list,
// with a growing, jittered wait between passes — and restores on the new
// connection what the application had registered: subscriptions,
// request handlers, announcements, registry and state watches (each
// watch resyncs, so it reports what it missed). Calls open on the lost
// connection fail with DISCONNECT and are never sent again: a request
// may have run, an event may have been handled.

// ConnEventKind says what happened to the connection.
type ConnEventKind string

// The events, in the order a client sees them: any number of
// Disconnected, each followed by Reconnected or by Closed, and Closed
// once at the end.
const (
	Disconnected ConnEventKind = "disconnected" // the live connection was lost; the client is reconnecting
	Reconnected  ConnEventKind = "reconnected"  // a connection is live again, with what could be restored
	Closed       ConnEventKind = "closed"       // the client has ended: Close, or no connection again
)

// ConnEvent is one change of the connection (Options.OnConnEvent).
type ConnEvent struct {
	Kind ConnEventKind
	// Server is the endpoint lost (Disconnected) or now connected
	// (Reconnected); empty with Options.Dial.
	Server string
	// Broker is the broker's node name (Reconnected).
	Broker string
	// Attempts is how many dials the reconnect took (Reconnected).
	Attempts int
	// Err is why the connection was lost (Disconnected), why the client
	// ended (Closed), or, on Reconnected, what the new connection's broker
	// refused to restore (nil when everything came back).
	Err error
}

// permanent reports whether a failed dial cannot succeed by trying again:
// the credential is refused or the protocol differs.
func permanent(err error) bool {
	return errors.Is(err, ErrAuth) || errors.Is(err, ErrIncompatible)
}

// notify hands an event to Options.OnConnEvent, then to each function
// NotifyConn registered, on the supervisor.
func (c *Client) notify(ev ConnEvent) {
	if f := c.opts.OnConnEvent; f != nil {
		_ = c.protect(func() { f(ev) })
	}
	c.watchers.mu.Lock()
	fs := make([]func(ConnEvent), 0, len(c.watchers.fs))
	for _, f := range c.watchers.fs {
		fs = append(fs, f)
	}
	c.watchers.mu.Unlock()
	for _, f := range fs {
		_ = c.protect(func() { f(ev) })
	}
}

// connWatchers are the functions NotifyConn registered.
type connWatchers struct {
	mu   sync.Mutex
	next uint64
	fs   map[uint64]func(ConnEvent)
}

// NotifyConn registers f to be told each change of the connection, as
// Options.OnConnEvent is (after it, on the same goroutine, so f must not
// block): for a part of an application that is handed a connected
// client, such as a durable device's sender, which pushes its outbox at
// once on Reconnected. stop unregisters f; f is not called once stop has
// returned, unless a call was under way.
func (c *Client) NotifyConn(f func(ConnEvent)) (stop func()) {
	w := &c.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fs == nil {
		w.fs = map[uint64]func(ConnEvent){}
	}
	w.next++
	id := w.next
	w.fs[id] = f
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fs, id)
	}
}

// WaitConnected returns nil once the client has a live connection (at
// once when it has one), the client's error once it has ended (a
// *VersionError, say, when the broker it reconnected to speaks another
// protocol), or ctx's error.
func (c *Client) WaitConnected(ctx context.Context) error {
	if err := c.awaitUp(ctx, nil, time.Time{}, nil); err != nil {
		if errors.Is(err, errUnreachable) && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return nil
}

// supervise runs for the client's life, starting with its first
// connection, and ends it with Closed.
func (c *Client) supervise(cn *conn) {
	for {
		select {
		case <-cn.done:
		case <-c.done: // shutdown closed the live connection's queue
			<-cn.done
		}
		cn.loops.Wait()
		if c.closing() {
			c.notify(ConnEvent{Kind: Closed, Err: c.Err()})
			return
		}
		if c.opts.MaxReconnects == NoReconnect || cn.replaced {
			// A replaced connection is not taken back: the node now runs
			// elsewhere, and two copies would take turns replacing each other.
			c.shutdown(cn.err)
			c.notify(ConnEvent{Kind: Closed, Err: c.Err()})
			return
		}
		c.log.Warn("connection lost; reconnecting", "server", cn.server, "err", cn.err)
		c.notify(ConnEvent{Kind: Disconnected, Server: cn.server, Err: cn.err})
		next, r, attempts, err := c.redial(cn.server)
		if err == nil {
			err = c.restore(next, r, attempts)
		}
		if err != nil {
			c.shutdown(err) // no-op after Close
			c.notify(ConnEvent{Kind: Closed, Err: c.Err()})
			return
		}
		cn = next
	}
}

// redial dials round the server list, starting after the one lost, until
// a handshake succeeds, MaxReconnects attempts fail, or the client closes.
func (c *Client) redial(lost string) (*conn, *wire.Reader, int, error) {
	n := len(c.servers)
	first := 0
	for i, s := range c.servers {
		if s == lost {
			first = i + 1
		}
	}
	var last error
	for attempt := 1; c.opts.MaxReconnects == ReconnectForever || attempt <= c.opts.MaxReconnects; attempt++ {
		if attempt > n && (attempt-1)%n == 0 { // a new pass: wait first
			t := time.NewTimer(c.opts.reconnectWait((attempt - 1) / n))
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return nil, nil, attempt, ErrClosed
			}
		}
		server := c.servers[(first+attempt-1)%n]
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.HandshakeTimeout)
		cn, r, err := c.dialConn(ctx, server)
		cancel()
		switch {
		case err == nil:
			return cn, r, attempt, nil
		case c.closing():
			return nil, nil, attempt, ErrClosed
		case permanent(err):
			return nil, nil, attempt, err
		}
		c.log.Info("reconnect attempt failed", "server", server, "attempt", attempt, "err", err)
		last = err
	}
	return nil, nil, c.opts.MaxReconnects, fmt.Errorf("%w: no connection after %d attempts: %v", ErrDisconnect, c.opts.MaxReconnects, last)
}

// restoreCall is one registration restore sent on the new connection,
// with what to do with the broker's verdict.
type restoreCall struct {
	p       *pending
	id      string
	what    string
	verdict func(error) // nil error: restored
}

// restore makes cn the live connection and re-registers on it what the
// application holds, then reports the broker's verdicts (Reconnected).
// It returns an error only when the client closed meanwhile.
func (c *Client) restore(cn *conn, r *wire.Reader, attempts int) error {
	c.startWriter(cn)
	calls, ok := c.restoreMessaging(cn)
	if !ok {
		c.lost(cn, ErrClosed) // never live: nothing to fail but its queue
		cn.loops.Wait()
		return ErrClosed
	}
	calls = append(calls, c.discovery.restore(cn)...)
	calls = append(calls, c.state.restore(cn)...)
	// The reader starts after the restores are queued: it owns the
	// replicas they hand over.
	c.startReader(cn, r)
	var refused []error
	deadline := time.Now().Add(c.opts.DefaultTimeout)
	for _, rc := range calls {
		a, err := c.await(c.ctx, rc.p, rc.id, deadline)
		err = controlResult(a, err)
		if err != nil && !errors.Is(err, ErrDisconnect) && !c.closing() {
			c.log.Warn("could not restore after reconnecting", "what", rc.what, "err", err)
			refused = append(refused, fmt.Errorf("%s: %w", rc.what, err))
		}
		rc.verdict(err)
	}
	c.log.Info("reconnected", "server", cn.server, "broker", cn.welcome.Broker, "attempts", attempts)
	c.notify(ConnEvent{Kind: Reconnected, Server: cn.server, Broker: cn.welcome.Broker, Attempts: attempts, Err: errors.Join(refused...)})
	return nil
}

// restoreMessaging re-registers the subscriptions and request handlers on
// cn and makes it the live connection, in one critical section of mu, so
// whatever the application does next is queued after them. It reports
// false when the client is closing.
func (c *Client) restoreMessaging(cn *conn) ([]restoreCall, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing() {
		return nil, false
	}
	c.cur.Store(cn)
	c.last.Store(cn)
	var calls []restoreCall
	for name := range c.subs {
		w := &regWait{done: make(chan struct{})}
		c.subReg[name] = w // subscribers joining now share this verdict
		p, id, ok := c.restoreMessageLocked(cn, subscribeMessage(name, c.subQueue[name]), nil)
		if !ok {
			w.err = callError(errQueueFull)
			close(w.done)
			continue
		}
		calls = append(calls, restoreCall{p: p, id: id, what: "subscribe " + name, verdict: func(err error) {
			w.err = err
			close(w.done)
		}})
	}
	for name := range c.handlers {
		if p, id, ok := c.restoreLocked(cn, wire.CmdHandle, name, nil); ok {
			calls = append(calls, restoreCall{p: p, id: id, what: "handle " + name, verdict: func(error) {}})
		}
	}
	if c.up != nil { // set by lost
		close(c.up)
		c.up = nil
	}
	return calls, true
}

// restoreOn registers and queues one control request on cn; onAnswer, if
// set, runs on the reader with the answer.
func (c *Client) restoreOn(cn *conn, cmd, body string, onAnswer func(*wire.Message)) (*pending, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restoreLocked(cn, cmd, body, onAnswer)
}

// restoreLocked is restoreOn with mu held.
func (c *Client) restoreLocked(cn *conn, cmd, body string, onAnswer func(*wire.Message)) (*pending, string, bool) {
	return c.restoreMessageLocked(cn, controlMessage(cmd, body), onAnswer)
}

// restoreMessageLocked is restoreLocked of the control message m.
func (c *Client) restoreMessageLocked(cn *conn, m *wire.Message, onAnswer func(*wire.Message)) (*pending, string, bool) {
	cmd, body := m.Value(wire.HeaderCommand), string(m.Body())
	id := m.Value(wire.HeaderID)
	p, err := c.registerOnLocked(cn, nil, id, onAnswer)
	if err != nil {
		return nil, "", false
	}
	if !cn.out.Enqueue(m, time.Time{}) {
		delete(c.calls, id)
		c.log.Warn("could not queue a restore", "command", cmd, "channel", body)
		return nil, "", false
	}
	return p, id, true
}

// resyncCall is the restore of a watch: a refusal ends it (end) with
// ErrResync; a lost connection leaves it for the next reconnect.
func resyncCall(p *pending, id, what string, end func(error)) restoreCall {
	return restoreCall{p: p, id: id, what: what, verdict: func(err error) {
		if err != nil && !errors.Is(err, ErrDisconnect) {
			end(fmt.Errorf("%w: %v", ErrResync, err))
		}
	}}
}

// endUnqueued ends the watches whose resync the new connection's queue
// refused.
func endUnqueued(ends []func(error)) {
	for _, end := range ends {
		end(fmt.Errorf("%w: could not queue the watch", ErrResync))
	}
}
