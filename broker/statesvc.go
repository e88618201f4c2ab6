package broker

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"busbar/auth"
	"busbar/state"
	"busbar/statestore"
	"busbar/wire"
)

// MaxNamespacesPerNode bounds the namespaces one node may own (create).
const MaxNamespacesPerNode = 64

// stateService holds every namespace (package state) and, with
// Options.StatePath, keeps them in an embedded bbolt store: a write is on
// disk (fsync) before it is applied, answered or sent to watchers, so a
// broker restart loses nothing it acknowledged. Watchers of a namespace
// get its snapshot, then every applied delta numbered in order, all
// queued under one lock: no gap and no duplicate unless a watcher's queue
// overflows: then the watch is dropped and the watcher told to resync.
type stateService struct {
	mu       sync.Mutex
	store    *statestore.Store // nil: in memory only (state_store.go)
	spaces   map[string]*state.Namespace
	owned    map[string]int                // namespaces per owner node
	watchers map[string]map[*conn]struct{} // namespace → watching connections
	watching map[*conn]map[string]struct{} // the reverse, to clean up and to bound
	// lost are the watches that missed a delta (the watcher's queue was
	// full): they no longer watch and are owed a bus.state.reset, which
	// the sweeper retries until it fits; the client then watches again
	// and merges a fresh snapshot. A replica that stopped receiving at the
	// end of a burst would otherwise never notice.
	lost map[*conn]map[string]struct{}
	// On a bus, each namespace's incarnation and owner record, and the
	// tombstones of dropped ones (state_meta.go).
	meta    map[string]nsMeta
	dropped map[string]uint64 // tombstones' floors
}

// write applies d from c: the namespace is created, owned by c's node, by
// its first write. Permission comes first (state-write, or state-admin to
// open; creating needs state-admin too), then ownership: a foreign write is
// refused and counted; a stale one is answered with the winner (Applied
// false).
func (b *Broker) stateWrite(c *conn, d state.Delta, open bool) (state.Result, *refusal) {
	action := auth.ActionStateWrite
	if open {
		action = auth.ActionStateAdmin
	}
	if r := permitState(c, action, d.NS); r != nil {
		return state.Result{}, r
	}
	s := &b.state
	s.mu.Lock()
	defer s.mu.Unlock()
	n, meta := s.spaces[d.NS], s.meta[d.NS]
	if n == nil {
		meta = s.newMetaLocked(d.NS)
		if r := permitCreate(c, d.NS); r != nil {
			return state.Result{}, r
		}
		if s.owned[c.node] >= MaxNamespacesPerNode {
			return state.Result{}, rejectf("%s owns %d namespaces, the limit", c.node, MaxNamespacesPerNode)
		}
		n = state.New(d.NS, c.node)
	}
	d.Source, d.Seq = c.node, 0
	if open {
		// Opening is the owner's write of the key as it stands, one version
		// past the key's own (versions compare per key, so a writer that
		// pushed another key's version to the limit cannot stop it).
		if c.node != n.Owner() {
			b.stats.stateRefused.Add(1)
			return state.Result{}, rejectf("only %s, the owner of namespace %q, may open its keys", n.Owner(), d.NS)
		}
		cur, ok := n.Get(d.Key)
		if ok && cur.Open {
			return state.Result{Applied: false, Found: true, Entry: cur}, nil // open already
		}
		d.Version, d.Open, d.Value, d.Deleted = 1, true, nil, true
		if ok {
			d.Version = cur.Version + 1
			if !cur.Deleted {
				d.Value, d.Deleted = cur.Value, false
			}
		}
	}
	e, err := n.Decide(d)
	switch {
	case errors.Is(err, state.ErrStale):
		return state.Result{Applied: false, Found: true, Entry: e}, nil
	case errors.Is(err, state.ErrForeign):
		b.stats.stateRefused.Add(1)
		return state.Result{}, rejectf("namespace %q belongs to %s and key %q is not open for other writers", d.NS, n.Owner(), d.Key)
	case err != nil:
		return state.Result{}, rejectf("%v", err)
	}
	seq := n.Seq() + 1
	if err := s.persist(n, meta, e, seq); err != nil {
		b.log.Error("state store write failed", "ns", d.NS, "key", d.Key, "err", err)
		return state.Result{}, refuse(wire.ResultHandler, "the broker could not store the write: "+err.Error())
	}
	if s.spaces[d.NS] == nil {
		s.spaces[d.NS] = n
		s.meta[d.NS] = meta
		s.owned[c.node]++
	}
	n.Commit(e)
	n.Advance()
	s.notifyLocked(n.Delta(e, seq))
	b.stateWritten(c, d.NS, d.Key, d.Deleted, seq)
	b.bus.replicateState(n, meta, e) // to every other broker (cluster_state.go)
	return state.Result{Applied: true, Found: true, Entry: e}, nil
}

// notifyLocked queues a numbered delta for the namespace's watchers.
func (s *stateService) notifyLocked(d state.Delta) {
	ws := s.watchers[d.NS]
	if len(ws) == 0 {
		return
	}
	body, _ := wire.JSON(d)
	m := wire.New(wire.TypeEvent, wire.CmdStateDelta).WithHeader(wire.HeaderID, "state-"+strconv.FormatUint(d.Seq, 10)).WithBody(body)
	for w := range ws {
		if !w.enqueue(m, time.Time{}) {
			w.b.log.Warn("state delta dropped: watcher's queue is full; it will be told to resync", "node", w.node, "ns", d.NS, "seq", d.Seq)
			s.unwatchLocked(w, d.NS)
			if s.lost[w] == nil {
				s.lost[w] = map[string]struct{}{}
			}
			s.lost[w][d.NS] = struct{}{}
		}
	}
}

// retryLost sends the owed bus.state.reset events that fit now (the
// sweeper's).
func (s *stateService) retryLost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w, spaces := range s.lost {
		for ns := range spaces {
			body, _ := wire.JSON(state.Query{NS: ns})
			m := wire.New(wire.TypeEvent, wire.CmdStateReset).WithHeader(wire.HeaderID, "reset").WithBody(body)
			if w.enqueue(m, time.Time{}) || w.out.Closing() {
				delete(spaces, ns)
			}
		}
		if len(spaces) == 0 {
			delete(s.lost, w)
		}
	}
}

// snapshotLocked is a namespace's snapshot; one that does not exist yet is
// empty, with no owner.
func (s *stateService) snapshotLocked(ns string) state.Snapshot {
	if n := s.spaces[ns]; n != nil {
		return n.Snapshot()
	}
	return state.Snapshot{NS: ns, Entries: []state.Entry{}}
}

// get answers bus.state.get; for every namespace (q.NS empty), only those
// may allows.
func (s *stateService) get(q state.Query, may func(ns string) bool) (any, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.NS == "" {
		all := make([]state.Snapshot, 0, len(s.spaces))
		for _, ns := range slices.Sorted(maps.Keys(s.spaces)) {
			if may(ns) {
				all = append(all, s.spaces[ns].Snapshot())
			}
		}
		return all, nil
	}
	if err := state.CheckName(q.NS); err != nil {
		return nil, rejectf("%v", err)
	}
	if q.Key == "" {
		return s.snapshotLocked(q.NS), nil
	}
	var r state.Result
	if n := s.spaces[q.NS]; n != nil {
		r.Entry, r.Found = n.Get(q.Key)
	}
	return r, nil
}

// watch registers c for ns's deltas; answer runs under the lock with the
// snapshot, so it is queued before any delta that follows it.
func (b *Broker) stateWatch(c *conn, ns string, answer func(state.Snapshot) bool) *refusal {
	if r := permitState(c, auth.ActionStateRead, ns); r != nil {
		return r
	}
	s := &b.state
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.out.Closing() { // retired: it must not watch again
		return rejectf("connection is closing")
	}
	mine := s.watching[c]
	if _, dup := mine[ns]; !dup && len(mine) >= b.opts.MaxRegistrations {
		return rejectf("%d namespaces watched, the limit per connection", b.opts.MaxRegistrations)
	}
	if !answer(s.snapshotLocked(ns)) {
		return nil
	}
	if mine == nil {
		mine = map[string]struct{}{}
		s.watching[c] = mine
	}
	mine[ns] = struct{}{}
	if s.watchers[ns] == nil {
		s.watchers[ns] = map[*conn]struct{}{}
	}
	s.watchers[ns][c] = struct{}{}
	return nil
}

func (s *stateService) unwatch(c *conn, ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unwatchLocked(c, ns)
}

func (s *stateService) unwatchLocked(c *conn, ns string) {
	delete(s.watching[c], ns)
	if len(s.watching[c]) == 0 {
		delete(s.watching, c)
	}
	delete(s.watchers[ns], c)
	if len(s.watchers[ns]) == 0 {
		delete(s.watchers, ns)
	}
}

// leave drops c's watches.
func (s *stateService) leave(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ns := range s.watching[c] {
		s.unwatchLocked(c, ns)
	}
	delete(s.lost, c)
}

// stateControl handles the bus.state.* requests; on success it has
// answered.
func (b *Broker) stateControl(c *conn, m *wire.Message, s *subject) *refusal {
	answer := func(v any) *refusal { return b.replyJSON(c, *s, v, "the answer", "ask for less") }
	if s.command == wire.CmdStateSet {
		var d state.Delta
		if err := json.Unmarshal(m.Body(), &d); err != nil {
			return rejectf("state delta: %v", err)
		}
		s.topic = d.NS
		r, no := b.stateWrite(c, d, false)
		if no != nil {
			return no
		}
		return answer(hideValue(c, d.NS, r, true))
	}
	var q state.Query
	if err := json.Unmarshal(m.Body(), &q); err != nil {
		return rejectf("state query: %v", err)
	}
	s.topic = q.NS
	switch s.command {
	case wire.CmdStateOpen:
		r, no := b.stateWrite(c, state.Delta{NS: q.NS, Key: q.Key}, true)
		if no != nil {
			return no
		}
		return answer(hideValue(c, q.NS, r, false))
	case wire.CmdStateGet:
		if q.NS != "" {
			if no := permitState(c, auth.ActionStateRead, q.NS); no != nil {
				return no
			}
		}
		v, no := b.state.get(q, func(ns string) bool { return mayState(c, auth.ActionStateRead, ns) })
		if no != nil {
			return no
		}
		return answer(v)
	case wire.CmdStateWatch:
		// The snapshot is answered under the state lock, before any delta.
		return b.stateWatch(c, q.NS, func(snap state.Snapshot) bool {
			no := answer(snap)
			if no != nil {
				b.answer(c, *s, no)
			}
			return no == nil
		})
	case wire.CmdStateUnwatch:
		b.state.unwatch(c, q.NS)
		return answer(nil)
	}
	return rejectf("unknown control command %s", s.command)
}
