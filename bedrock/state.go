package bedrock

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"busbar/state"
)

// Replicated state over the bus (state-delta, state-req and state-snapshot;
// docs/bedrock.md#the-go-api) with busbar's rules (package state): Lamport
// versions, ties to the greater src, tombstones, owner-only writes unless a
// key is opened. A namespace's owner is the add-on that serves its snapshots: the
// one that called Own. Replicas learn the owner from the first snapshot
// they hear (the envelope's src); until then they apply nothing of that
// namespace and ask for a snapshot.

// deltaData is the payload of state-delta: {ns, key, value?, ver, del?}
// (plus open, from the owner, when it opens the key).
type deltaData struct {
	NS    string          `json:"ns"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"`
	Ver   uint64          `json:"ver"`
	Del   bool            `json:"del,omitempty"`
	Open  bool            `json:"open,omitempty"`
}

// snapshotData is the payload of state-snapshot: {ns, entries}.
type snapshotData struct {
	NS      string        `json:"ns"`
	Entries []state.Entry `json:"entries"`
}

// requestData is the payload of state-req: {} or {ns}.
type requestData struct {
	NS string `json:"ns,omitempty"`
}

// StateChange is an entry that changed in a replica.
type StateChange struct {
	NS    string
	Entry state.Entry
}

// StateOptions configure a State.
type StateOptions struct {
	// OnChange runs for every entry that changes (a delta or a snapshot),
	// on the bus's goroutine.
	OnChange func(StateChange)
	// ResyncTicks, when set, has replicas ask for a snapshot of each
	// namespace they follow this often: on a lossy medium, a lost delta
	// is otherwise only repaired by a later write of the same key.
	ResyncTicks int64
}

// State holds this add-on's namespaces and its replicas of others'.
type State struct {
	bus  *Bus
	opts StateOptions

	mu      sync.Mutex
	clock   uint64 // Lamport: the highest version seen
	spaces  map[string]*state.Namespace
	follow  map[string]bool // namespaces asked for ("": all), asked again at each resync
	refused int64
	stops   []func()
}

// Errors of State's writes.
var (
	ErrUnknownNamespace = errors.New("bedrock: namespace not known yet (no snapshot heard)")
	ErrNotOpen          = errors.New("bedrock: key is not open and this add-on does not own the namespace")
)

// NewState starts state on bus: it broadcasts the snapshots of owned
// namespaces as they are created, answers state-req, and applies deltas
// and snapshots it hears.
func NewState(bus *Bus, opts StateOptions) *State {
	s := &State{bus: bus, opts: opts, spaces: map[string]*state.Namespace{}, follow: map[string]bool{}}
	s.stops = []func(){
		bus.On(TypeStateDelta, s.onDelta),
		bus.On(TypeStateRequest, s.onRequest),
		bus.On(TypeStateSnapshot, s.onSnapshot),
	}
	if opts.ResyncTicks > 0 {
		s.stops = append(s.stops, bus.Clock().Every(opts.ResyncTicks, s.resync))
	}
	return s
}

// Close stops listening.
func (s *State) Close() {
	for _, stop := range s.stops {
		stop()
	}
}

// Own makes this add-on the owner of ns and broadcasts its (empty)
// snapshot.
func (s *State) Own(ns string) error {
	if err := state.CheckName(ns); err != nil {
		return err
	}
	s.mu.Lock()
	n := s.spaces[ns]
	if n == nil {
		n = state.New(ns, s.bus.SelfID())
		s.spaces[ns] = n
	}
	owner := n.Owner()
	s.mu.Unlock()
	if owner != s.bus.SelfID() {
		return fmt.Errorf("bedrock: namespace %q belongs to %s", ns, owner)
	}
	s.sendSnapshot(ns, "")
	// A restarted owner starts empty, at clock 0: replicas that hold the
	// namespace send it back (see onRequest), so it recovers its entries
	// and its clock, and its next writes win.
	body, _ := json.Marshal(requestData{NS: ns})
	_, _ = s.bus.Send(SendOptions{Type: TypeStateRequest, Data: body})
	return nil
}

// Follow asks for a snapshot of ns (of every namespace when ns is ""), to
// replicate it.
func (s *State) Follow(ns string) {
	s.mu.Lock()
	s.follow[ns] = true
	s.mu.Unlock()
	body, _ := json.Marshal(requestData{NS: ns})
	_, _ = s.bus.Send(SendOptions{Type: TypeStateRequest, Data: body})
}

// Get returns a key's entry in a namespace held here.
func (s *State) Get(ns, key string) (state.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.spaces[ns]; n != nil {
		return n.Get(key)
	}
	return state.Entry{}, false
}

// Snapshot returns a namespace held here.
func (s *State) Snapshot(ns string) (state.Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.spaces[ns]; n != nil {
		return n.Snapshot(), true
	}
	return state.Snapshot{}, false
}

// Refused counts foreign writes dropped.
func (s *State) Refused() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.refused
	for _, sp := range s.spaces {
		n += sp.Refused()
	}
	return n
}

// Set writes value (JSON) to key, locally first, then to every replica.
func (s *State) Set(ns, key string, value json.RawMessage) (state.Entry, error) {
	return s.write(deltaData{NS: ns, Key: key, Value: value})
}

// Delete writes a tombstone.
func (s *State) Delete(ns, key string) (state.Entry, error) {
	return s.write(deltaData{NS: ns, Key: key, Del: true})
}

// Open lets every add-on write key (the owner only).
func (s *State) Open(ns, key string) (state.Entry, error) {
	s.mu.Lock()
	n := s.spaces[ns]
	var d deltaData
	if n != nil {
		d = deltaData{NS: ns, Key: key, Open: true, Del: true}
		if cur, ok := n.Get(key); ok && !cur.Deleted {
			d.Value, d.Del = cur.Value, false
		}
	}
	s.mu.Unlock()
	if n == nil {
		return state.Entry{}, ErrUnknownNamespace
	}
	return s.write(d)
}

func (s *State) write(d deltaData) (state.Entry, error) {
	if d.Value != nil {
		// Store what replicas will decode from the wire: the value as
		// JavaScript would write it (no whitespace, its escaping).
		if !json.Valid(d.Value) {
			return state.Entry{}, fmt.Errorf("%w: value is not JSON", state.ErrInvalid)
		}
		v, err := canonical(nil, d.Value)
		if err != nil {
			return state.Entry{}, err
		}
		d.Value = v
	}
	s.mu.Lock()
	n := s.spaces[d.NS]
	if n == nil {
		s.mu.Unlock()
		return state.Entry{}, ErrUnknownNamespace
	}
	s.clock = min(s.clock+1, state.MaxVersion)
	d.Ver = s.clock
	e, err := n.Apply(state.Delta{NS: d.NS, Key: d.Key, Value: d.Value, Version: d.Ver, Deleted: d.Del, Source: s.bus.SelfID(), Open: d.Open})
	s.mu.Unlock()
	switch {
	case errors.Is(err, state.ErrForeign):
		return state.Entry{}, ErrNotOpen
	case err != nil:
		return state.Entry{}, err
	}
	body, _ := json.Marshal(d)
	if _, err := s.bus.Send(SendOptions{Type: TypeStateDelta, Data: body}); err != nil {
		return e, err
	}
	s.changed(d.NS, e)
	return e, nil
}

func (s *State) changed(ns string, e state.Entry) {
	if s.opts.OnChange != nil {
		s.opts.OnChange(StateChange{NS: ns, Entry: e})
	}
}

func (s *State) onDelta(e *Envelope) {
	d, err := decodeDelta(e.Data)
	if err != nil {
		return
	}
	s.mu.Lock()
	n := s.spaces[d.NS]
	if n == nil {
		s.mu.Unlock()
		return // not followed, or its owner not known yet
	}
	entry, err := n.Apply(state.Delta{NS: d.NS, Key: d.Key, Value: d.Value, Version: d.Ver, Deleted: d.Del, Source: e.Src, Open: d.Open})
	if err == nil { // only what is stored moves the clock
		s.clock = max(s.clock, entry.Version)
	}
	s.mu.Unlock()
	if err == nil {
		s.changed(d.NS, entry)
	}
}

func (s *State) onRequest(e *Envelope) {
	q, err := decodeStateRequest(e.Data)
	if err != nil {
		return
	}
	s.mu.Lock()
	var mine, theirs []string
	for ns, n := range s.spaces {
		if q.NS != "" && q.NS != ns {
			continue
		}
		switch n.Owner() {
		case s.bus.SelfID():
			mine = append(mine, ns)
		case e.Src: // the owner asks for its own namespace: it restarted
			theirs = append(theirs, ns)
		}
	}
	s.mu.Unlock()
	for _, ns := range mine {
		s.sendSnapshot(ns, e.Src)
	}
	for _, ns := range theirs {
		s.sendSnapshot(ns, e.Src)
	}
}

// sendSnapshot sends a namespace's snapshot to dst ("" broadcasts).
func (s *State) sendSnapshot(ns, dst string) {
	s.mu.Lock()
	n := s.spaces[ns]
	snap := n.Snapshot()
	s.mu.Unlock()
	body, _ := json.Marshal(snapshotData{NS: ns, Entries: snap.Entries})
	_, _ = s.bus.Send(SendOptions{Dst: dst, Type: TypeStateSnapshot, Data: body})
}

func (s *State) onSnapshot(e *Envelope) {
	snap, err := decodeSnapshot(e.Data)
	if err != nil || state.CheckName(snap.NS) != nil {
		return
	}
	s.mu.Lock()
	n := s.spaces[snap.NS]
	switch {
	case n == nil:
		n = state.New(snap.NS, e.Src) // the first snapshot heard names the owner
		s.spaces[snap.NS] = n
	case n.Owner() == s.bus.SelfID() && e.Src != s.bus.SelfID():
		// A replica's copy of our namespace, sent because we asked (a
		// restart): take back what the rules let it hold — our own
		// writes and writes to open keys.
		kept := snap.Entries[:0]
		for _, en := range snap.Entries {
			if en.Source == s.bus.SelfID() || en.Open {
				kept = append(kept, en)
			}
		}
		snap.Entries = kept
	case n.Owner() != e.Src:
		s.refused++ // another add-on claims the namespace
		s.mu.Unlock()
		return
	}
	for _, en := range snap.Entries {
		s.clock = max(s.clock, min(en.Version, state.MaxVersion))
	}
	changed := n.Merge(state.Snapshot{NS: snap.NS, Owner: n.Owner(), Entries: snap.Entries})
	// Writes of ours the owner's snapshot lacks (a delta lost on the way
	// to the owner): only their writer can send them again, since a
	// delta's source is its envelope's src.
	var resend []deltaData
	if n.Owner() != s.bus.SelfID() {
		theirs := make(map[string]state.Entry, len(snap.Entries))
		for _, en := range snap.Entries {
			theirs[en.Key] = en
		}
		for _, en := range n.Snapshot().Entries {
			t, ok := theirs[en.Key]
			if en.Source == s.bus.SelfID() && (!ok || state.Wins(en.Version, en.Source, t.Version, t.Source)) {
				resend = append(resend, deltaData{NS: snap.NS, Key: en.Key, Value: en.Value, Ver: en.Version, Del: en.Deleted})
			}
		}
	}
	s.mu.Unlock()
	for _, en := range changed {
		s.changed(snap.NS, en)
	}
	for _, d := range resend {
		body, _ := json.Marshal(d)
		_, _ = s.bus.Send(SendOptions{Type: TypeStateDelta, Data: body})
	}
}

// resync asks for a snapshot of every namespace followed but not owned,
// and of those asked for and not heard yet (the request or the answer
// may have been lost).
func (s *State) resync() {
	s.mu.Lock()
	var follow []string
	for ns, n := range s.spaces {
		if n.Owner() != s.bus.SelfID() && !s.follow[""] {
			follow = append(follow, ns)
		}
	}
	for ns := range s.follow {
		if s.spaces[ns] == nil {
			follow = append(follow, ns)
		}
	}
	s.mu.Unlock()
	for _, ns := range follow {
		body, _ := json.Marshal(requestData{NS: ns})
		_, _ = s.bus.Send(SendOptions{Type: TypeStateRequest, Data: body})
	}
}
