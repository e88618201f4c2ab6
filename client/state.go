package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"busbar/state"
	"busbar/wire"
)

// Replicated state (package state has the rules): namespaced key–value
// entries held by the broker, replicated to every node that watches them.
// Values are JSON. A namespace belongs to the node that first writes it;
// other nodes may write only keys its owner opened. What the principal may
// not do on a namespace is refused with a *RequestError of kind REJECTED
// (errors.Is(err, ErrRejected)).

// StateWatchBuffer is how many changes a StateWatch holds for a reader
// that is behind; one more ends the watch with ErrWatchOverflow.
const StateWatchBuffer = 1024

// ErrSuperseded is returned (wrapped in a *SupersededError) by a write that
// lost to a newer entry: another node wrote the key with a higher version,
// or the same version from a greater node name.
var ErrSuperseded = errors.New("client: state write superseded")

// SupersededError carries the entry that won.
type SupersededError struct{ Winner state.Entry }

func (e *SupersededError) Error() string {
	return fmt.Sprintf("%v by version %d from %s", ErrSuperseded, e.Winner.Version, e.Winner.Source)
}

func (e *SupersededError) Unwrap() error { return ErrSuperseded }

// stateClient is the client's part for replicated state: the live
// replicas (StateWatch) and the Lamport clocks of writes. Its locks are its
// own: neither is ever held together with Client.mu or discovery's (calls
// are registered with Client.register before mu is taken), and clockMu is
// a leaf.
type stateClient struct {
	c *Client // set once in Connect; read-only after

	// mu guards watches and every StateWatch's live, resyncTimer and
	// watchLife. bus.state.watch and bus.state.unwatch are queued under
	// it, so they leave in the order the watches came and went.
	mu      sync.Mutex
	watches map[string]map[*StateWatch]struct{} // per namespace

	clockMu sync.Mutex        // guards clocks
	clocks  map[string]uint64 // per namespace, the Lamport clock of state writes: the highest version seen
}

func (st *stateClient) init(c *Client) {
	st.c = c
	st.watches = map[string]map[*StateWatch]struct{}{}
	st.clocks = map[string]uint64{}
}

// State is a handle on one namespace. It holds no data: Get, Snapshot and
// Watch ask the broker.
type State struct {
	c  *Client
	ns string
}

// State returns a handle on namespace ns.
func (c *Client) State(ns string) *State { return &State{c: c, ns: ns} }

// seen advances the Lamport clock of namespace ns past a version it has
// seen. Clocks are per namespace — versions only ever compare within one
// key — so a writer that pushed one namespace's versions up cannot stop
// this client writing another.
func (st *stateClient) seen(ns string, ver uint64) {
	st.clockMu.Lock()
	st.clocks[ns] = max(st.clocks[ns], ver)
	st.clockMu.Unlock()
}

// tick returns the version of a new write in ns: its clock plus one,
// capped at state.MaxVersion (a write at the cap still beats every lower
// version).
func (st *stateClient) tick(ns string) uint64 {
	st.clockMu.Lock()
	defer st.clockMu.Unlock()
	ver := min(st.clocks[ns]+1, state.MaxVersion)
	st.clocks[ns] = ver
	return ver
}

// stateCall sends a bus.state.* request and decodes its answer into out.
func (s *State) stateCall(ctx context.Context, cmd string, body any, out any) error {
	raw, err := wire.JSON(body)
	if err != nil {
		return err
	}
	c := s.c
	a, err := c.call(ctx, nil, controlMessage(cmd, string(raw)), c.deadline(ctx))
	if err := controlResult(a, err); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(a.Body(), out); err != nil {
		return fmt.Errorf("client: malformed %s answer: %w", cmd, err)
	}
	return nil
}

// Get returns a key's entry; found is false for a key never written (a
// deleted key is found, with Deleted set).
func (s *State) Get(ctx context.Context, key string) (e state.Entry, found bool, err error) {
	var r state.Result
	if err := s.stateCall(ctx, wire.CmdStateGet, state.Query{NS: s.ns, Key: key}, &r); err != nil {
		return state.Entry{}, false, err
	}
	s.c.state.seen(s.ns, r.Entry.Version)
	return r.Entry, r.Found, nil
}

// Set writes value (marshalled to JSON; a json.RawMessage is sent as is)
// and returns the stored entry. Its version is the namespace's Lamport
// clock plus one. A write that loses lost to an entry this client had not
// seen (else its version would be higher); having now seen it, Set writes
// once more, as a writer that had read first would have. Losing again (a
// third writer raced it) returns a *SupersededError.
func (s *State) Set(ctx context.Context, key string, value any) (state.Entry, error) {
	raw, ok := value.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = wire.JSON(value); err != nil {
			return state.Entry{}, err
		}
	}
	return s.write(ctx, state.Delta{NS: s.ns, Key: key, Value: raw})
}

// Delete writes a tombstone: the key reads as deleted, and no write with
// an older version can bring it back.
func (s *State) Delete(ctx context.Context, key string) (state.Entry, error) {
	return s.write(ctx, state.Delta{NS: s.ns, Key: key, Deleted: true})
}

func (s *State) write(ctx context.Context, d state.Delta) (state.Entry, error) {
	c := s.c
	for attempt := 0; ; attempt++ {
		d.Version = c.state.tick(s.ns)
		if err := d.Check(); err != nil {
			return state.Entry{}, &RequestError{Kind: wire.ResultRejected, RC: wire.RCFailure, Text: err.Error()}
		}
		var r state.Result
		if err := s.stateCall(ctx, wire.CmdStateSet, d, &r); err != nil {
			return state.Entry{}, err
		}
		c.state.seen(s.ns, r.Entry.Version)
		if r.Applied {
			return r.Entry, nil
		}
		if attempt > 0 {
			return state.Entry{}, &SupersededError{Winner: r.Entry}
		}
	}
}

// Open lets every node write key (only the namespace's owner may open a
// key; an open key stays open).
func (s *State) Open(ctx context.Context, key string) (state.Entry, error) {
	var r state.Result
	if err := s.stateCall(ctx, wire.CmdStateOpen, state.Query{NS: s.ns, Key: key}, &r); err != nil {
		return state.Entry{}, err
	}
	s.c.state.seen(s.ns, r.Entry.Version)
	return r.Entry, nil
}

// Drop deletes the whole namespace, whoever owns it: the way out when
// its owner is gone for good. It needs state_admin on the namespace
// (docs/state.md#administration); watchers resync and find it empty, and
// the next write creates it again, owned by its writer. A broker on a bus
// refuses it (REJECTED).
func (s *State) Drop(ctx context.Context) error {
	return s.stateCall(ctx, wire.CmdStateDrop, state.Query{NS: s.ns}, nil)
}

// SetOwner makes node the namespace's owner, whoever owns it now; its
// entries stay as they are. It needs state_admin on the namespace and
// returns the namespace's snapshot under its new owner. A broker on a bus
// refuses it (REJECTED).
func (s *State) SetOwner(ctx context.Context, node string) (state.Snapshot, error) {
	var snap state.Snapshot
	if err := s.stateCall(ctx, wire.CmdStateOwner, state.Transfer{NS: s.ns, Owner: node}, &snap); err != nil {
		return state.Snapshot{}, err
	}
	return snap, nil
}

// Snapshot returns every entry of the namespace, tombstones included.
func (s *State) Snapshot(ctx context.Context) (state.Snapshot, error) {
	var snap state.Snapshot
	if err := s.stateCall(ctx, wire.CmdStateGet, state.Query{NS: s.ns}, &snap); err != nil {
		return state.Snapshot{}, err
	}
	for _, e := range snap.Entries {
		s.c.state.seen(s.ns, e.Version)
	}
	return snap, nil
}

// Snapshots returns every namespace the broker holds that this node's
// principal may read (docs/state.md#permissions).
func (c *Client) Snapshots(ctx context.Context) ([]state.Snapshot, error) {
	var all []state.Snapshot
	if err := (&State{c: c}).stateCall(ctx, wire.CmdStateGet, state.Query{}, &all); err != nil {
		return nil, err
	}
	for _, snap := range all {
		for _, e := range snap.Entries {
			c.state.seen(snap.NS, e.Version)
		}
	}
	return all, nil
}

// StateWatch is a live replica of one namespace: Initial is the snapshot
// the watch started from, then Changes delivers every entry that changes
// after it, once, in order. When the replica notices it missed deltas (a
// gap in the broker's numbering, or the broker's bus.state.reset after it
// dropped some for this client, or dropped the namespace or gave it a new
// owner), it asks for a fresh snapshot and delivers what differs, so
// every key's latest value arrives once; a key the snapshot lacks (the
// namespace was dropped) arrives as an entry with only its key and
// Deleted.
type StateWatch struct {
	st      *stateClient     // set once; read-only after
	ns      string           // set once; read-only after
	replica *state.Namespace // owned by the reader (set by install before the watch is live)
	initial state.Snapshot   // set by the reader before the watch is live; read-only after
	changes chan state.Entry // sent to under st.mu, never blocking; closed by end
	resync  bool             // a snapshot request is on its way; owned by the reader

	// Guarded by st.mu:
	live        bool
	cn          *conn       // the connection its bus.state.watch went on
	resyncTimer *time.Timer // ends the watch if a resync is never answered
	watchLife
}

// ErrResync ends a watch whose replica could not get a fresh snapshot.
var ErrResync = errors.New("client: state watch could not resync")

// Watch starts a replica of the namespace. It ends when ctx is done,
// Close is called, the client closes, the reader falls StateWatchBuffer
// changes behind (Err then says ErrWatchOverflow), or a resync fails
// (ErrResync).
func (s *State) Watch(ctx context.Context) (*StateWatch, error) {
	c := s.c
	st := &c.state
	w := &StateWatch{st: st, ns: s.ns, changes: make(chan state.Entry, StateWatchBuffer), watchLife: watchLife{mu: &st.mu}}
	if err := state.CheckName(s.ns); err != nil {
		return nil, &RequestError{Kind: wire.ResultRejected, RC: wire.RCFailure, Text: err.Error()}
	}
	deadline := c.deadline(ctx)
	m := w.watchMessage()
	id := m.Value(wire.HeaderID)
	p, err := c.startUnder(ctx, &st.mu, m, deadline, w.install, func(cn *conn) {
		w.cn = cn
		if st.watches[s.ns] == nil {
			st.watches[s.ns] = map[*StateWatch]struct{}{}
		}
		st.watches[s.ns][w] = struct{}{}
	})
	if err != nil {
		w.end(nil)
		return nil, callError(err)
	}
	if err := c.finishWatch(ctx, p, id, deadline, "state snapshot", func() bool { return w.replica != nil }, &w.watchLife, w.end); err != nil {
		return nil, err
	}
	return w, nil
}

// watchMessage is a bus.state.watch for w's namespace; the reader installs
// the snapshot (install) when the answer arrives, before anything read
// after it.
func (w *StateWatch) watchMessage() *wire.Message {
	raw, _ := json.Marshal(state.Query{NS: w.ns})
	return controlMessage(wire.CmdStateWatch, string(raw))
}

// resyncNow asks for a fresh snapshot on cn (on its reader). Nobody waits
// for the answer but install, so a timer ends the watch if none comes.
func (w *StateWatch) resyncNow(cn *conn) {
	st, c := w.st, w.st.c
	m := w.watchMessage()
	id := m.Value(wire.HeaderID)
	p, err := c.registerOn(cn, id, w.install, nil)
	if errors.Is(err, errNotConnected) {
		return // cn is being lost: the reconnect resyncs the watch
	}
	w.resync = true
	if err == nil {
		st.mu.Lock()
		switch {
		case !w.live:
			p = nil // ended meanwhile: nothing to resync
		case !cn.out.Enqueue(m, c.deadline(context.Background())):
			p, err = nil, errQueueFull
		default:
			if w.resyncTimer != nil {
				w.resyncTimer.Stop()
			}
			w.resyncTimer = time.AfterFunc(c.opts.DefaultTimeout, func() {
				w.end(fmt.Errorf("%w: no snapshot within %v", ErrResync, c.opts.DefaultTimeout))
			})
		}
		st.mu.Unlock()
		if p == nil {
			c.forget(id)
		}
	}
	if err != nil {
		w.end(fmt.Errorf("%w: %v", ErrResync, err))
	}
}

// install takes a snapshot answer on the reader: the first becomes the
// replica, a later one (a resync) is merged and what changed delivered. A
// failed resync ends the watch: the replica can no longer be trusted.
func (w *StateWatch) install(a *wire.Message) {
	st := w.st
	var snap state.Snapshot
	failed := wire.ResponseRC(a).IsError()
	if !failed && json.Unmarshal(a.Body(), &snap) != nil {
		failed = true
	}
	if w.replica == nil { // the first answer: Watch reports a failure itself
		if failed {
			return
		}
		w.initial, w.replica = snap, state.FromSnapshot(snap)
		st.mu.Lock()
		w.live = true
		st.mu.Unlock()
		return
	}
	st.mu.Lock()
	if w.resyncTimer != nil {
		w.resyncTimer.Stop()
		w.resyncTimer = nil
	}
	st.mu.Unlock()
	if failed {
		w.end(fmt.Errorf("%w: %s", ErrResync, a.Value(wire.HeaderError)))
		return
	}
	for _, e := range snap.Entries {
		st.seen(snap.NS, e.Version)
	}
	w.resync = false
	changed := resyncChanges(w.replica, snap)
	w.replica = state.FromSnapshot(snap) // and its numbering: a dropped namespace's starts again
	for _, e := range changed {
		if !w.deliver(e) {
			return
		}
	}
}

// resyncChanges is what a fresh snapshot from the watch's own broker
// changes in the replica: each entry that differs from the replica's
// (after missed deltas, a newer one), and, for each key the replica holds
// that the snapshot lacks, an entry with only the key and Deleted: the
// namespace was dropped (and perhaps created again, with entries of its
// own whatever their versions).
func resyncChanges(replica *state.Namespace, snap state.Snapshot) []state.Entry {
	var out []state.Entry
	in := make(map[string]bool, len(snap.Entries))
	for _, e := range snap.Entries {
		in[e.Key] = true
		if cur, ok := replica.Get(e.Key); !ok || !sameEntry(cur, e) {
			out = append(out, e)
		}
	}
	for _, e := range replica.Snapshot().Entries {
		if !in[e.Key] {
			out = append(out, state.Entry{Key: e.Key, Deleted: true})
		}
	}
	return out
}

func sameEntry(a, b state.Entry) bool {
	return a.Key == b.Key && a.Version == b.Version && a.Source == b.Source &&
		a.Deleted == b.Deleted && a.Open == b.Open && bytes.Equal(a.Value, b.Value)
}

// deliver hands e to the application without blocking the reader.
func (w *StateWatch) deliver(e state.Entry) bool {
	st := w.st
	st.mu.Lock()
	if !w.live {
		st.mu.Unlock()
		return false
	}
	select {
	case w.changes <- e:
		st.mu.Unlock()
		return true
	default:
		st.mu.Unlock()
		w.end(ErrWatchOverflow) // st.mu is released: end takes it
		return false
	}
}

// live returns the live watches of ns.
func (st *stateClient) live(ns string) []*StateWatch {
	st.mu.Lock()
	defer st.mu.Unlock()
	var ws []*StateWatch
	for w := range st.watches[ns] {
		if w.live {
			ws = append(ws, w)
		}
	}
	return ws
}

// delta hands a numbered delta to the live watches of its namespace (on
// the reader).
func (st *stateClient) delta(cn *conn, m *wire.Message) {
	var d state.Delta
	if err := json.Unmarshal(m.Body(), &d); err != nil {
		st.c.log.Warn("malformed state delta", "err", err)
		return
	}
	st.seen(d.NS, d.Version)
	for _, w := range st.live(d.NS) {
		e, changed, gap := w.replica.Follow(d)
		switch {
		case gap && !w.resync:
			w.resyncNow(cn)
		case changed:
			w.deliver(e)
		}
	}
}

// reset is the broker saying it dropped deltas of a namespace for this
// client and stopped sending them: every watch of it resyncs (on the
// reader).
func (st *stateClient) reset(cn *conn, m *wire.Message) {
	var q state.Query
	if err := json.Unmarshal(m.Body(), &q); err != nil {
		st.c.log.Warn("malformed state reset", "err", err)
		return
	}
	for _, w := range st.live(q.NS) {
		w.resyncNow(cn)
	}
}

// Initial is the snapshot the watch started from.
func (w *StateWatch) Initial() state.Snapshot { return w.initial }

// Changes delivers every entry that changes, in order; it is closed when
// the watch ends.
func (w *StateWatch) Changes() <-chan state.Entry { return w.changes }

// Close ends the watch.
func (w *StateWatch) Close() { w.end(nil) }

func (w *StateWatch) end(why error) {
	w.endOnce(why, func() {
		st, c := w.st, w.st.c
		w.live = false
		if w.resyncTimer != nil {
			w.resyncTimer.Stop()
		}
		set := st.watches[w.ns]
		delete(set, w)
		if len(set) == 0 {
			delete(st.watches, w.ns)
			if cn := c.cur.Load(); cn != nil && !c.closing() {
				// Under st.mu, so a watch of ns started after this is
				// queued after it. A bus.state.unwatch the full queue
				// refuses is dropped, counted: the broker then keeps sending
				// deltas no watch takes (Stats).
				raw, _ := json.Marshal(state.Query{NS: w.ns})
				c.queueOrCount(cn, controlMessage(wire.CmdStateUnwatch, string(raw)), c.deadline(context.Background()), &c.drops.withdrawals)
			}
		}
		close(w.changes)
	})
}

// endAll ends every state watch when the client closes.
func (st *stateClient) endAll(why error) {
	st.mu.Lock()
	var ws []*StateWatch
	for _, set := range st.watches {
		for w := range set {
			ws = append(ws, w)
		}
	}
	st.mu.Unlock()
	for _, w := range ws {
		w.end(why)
	}
}

// restore resyncs, on cn, every watch bound to an older connection (the
// supervisor, during a reconnect, before cn's reader starts: the replicas
// and their resync flags are handed to that reader).
func (st *stateClient) restore(cn *conn) []restoreCall {
	c := st.c
	st.mu.Lock()
	var (
		calls    []restoreCall
		unqueued []func(error)
	)
	for _, set := range st.watches {
		for w := range set {
			if w.cn == cn {
				continue // started on cn meanwhile
			}
			w.cn, w.live, w.resync = cn, false, true
			if w.resyncTimer != nil {
				w.resyncTimer.Stop()
				w.resyncTimer = nil
			}
			raw, _ := json.Marshal(state.Query{NS: w.ns})
			p, id, ok := c.restoreOn(cn, wire.CmdStateWatch, string(raw), w.reinstall)
			switch {
			case ok:
				calls = append(calls, resyncCall(p, id, "watch state "+w.ns, w.end))
			case !cn.out.Closing(): // else lost meanwhile: the next reconnect resyncs it
				unqueued = append(unqueued, w.end)
			}
		}
	}
	st.mu.Unlock()
	endUnqueued(unqueued)
	return calls
}

// reinstall takes a reconnect's snapshot on the reader: it delivers each
// entry newer than the replica held (what the watcher missed), then
// follows the new connection's numbering from the snapshot.
func (w *StateWatch) reinstall(a *wire.Message) {
	st := w.st
	var snap state.Snapshot
	if wire.ResponseRC(a).IsError() {
		return // the verdict ends the watch
	}
	if json.Unmarshal(a.Body(), &snap) != nil {
		w.end(fmt.Errorf("%w: malformed snapshot", ErrResync))
		return
	}
	for _, e := range snap.Entries {
		st.seen(snap.NS, e.Version)
	}
	w.resync = false
	if w.replica == nil {
		return // its Watch failed with the lost connection
	}
	missed := w.replica.Merge(snap)
	w.replica = state.FromSnapshot(snap)
	st.mu.Lock()
	if w.ended {
		st.mu.Unlock()
		return
	}
	w.live = true
	st.mu.Unlock()
	for _, e := range missed {
		if !w.deliver(e) {
			return
		}
	}
}
