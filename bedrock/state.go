package bedrock

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"busbar/state"
)

// Replicated state over the bus (state-delta, state-req and state-snapshot;
// docs/bedrock.md#state) with the JavaScript bus's rule: every replica
// applies every add-on's write by last-write-wins (Lamport versions, ties
// to the greater src, tombstones), whoever owns the namespace. Owning a
// namespace (Own) means answering requests for its snapshot; with
// StrictOwnership it also means being the only namespaces this add-on
// writes, as the JavaScript option of that name. A replica that hears a
// delta of a followed namespace it does not hold yet applies it at once
// and asks for the rest of the namespace (state-req {ns}).

// deltaData is the payload of state-delta: {ns, key, value?, ver, del?}.
type deltaData struct {
	NS    string          `json:"ns"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"`
	Ver   uint64          `json:"ver"`
	Del   bool            `json:"del,omitempty"`
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
	// StrictOwnership restricts this add-on's writes (Set, Delete) to the
	// namespaces it owns, as the JavaScript bus's option of the same name
	// does; without it an add-on may write any namespace. Either way the
	// replicas apply every add-on's writes: the option guards this
	// add-on, not the namespace.
	StrictOwnership bool
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

// ErrNotOwned is a write, with StrictOwnership, to a namespace this
// add-on does not own.
var ErrNotOwned = errors.New("bedrock: namespace not owned by this add-on (StrictOwnership is on)")

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

// Own makes this add-on the owner of ns: it answers requests for the
// namespace's snapshot. It broadcasts the snapshot it holds, and asks for
// the namespace, so an owner that restarted empty gets its entries (and
// its clock) back from the replicas.
func (s *State) Own(ns string) error {
	if err := state.CheckName(ns); err != nil {
		return err
	}
	s.mu.Lock()
	n := s.spaces[ns]
	switch {
	case n == nil:
		n = state.New(ns, s.bus.SelfID())
		s.spaces[ns] = n
	case n.Owner() == "":
		n = s.setOwner(n, s.bus.SelfID())
	}
	owner := n.Owner()
	s.mu.Unlock()
	if owner != s.bus.SelfID() {
		return fmt.Errorf("bedrock: namespace %q belongs to %s", ns, owner)
	}
	s.sendSnapshot(ns, "")
	s.request(ns)
	return nil
}

// setOwner returns n with owner set, in place of n. Called with s.mu held.
func (s *State) setOwner(n *state.Namespace, owner string) *state.Namespace {
	snap := n.Snapshot()
	snap.Owner = owner
	n = state.FromSnapshot(snap)
	s.spaces[snap.NS] = n
	return n
}

// Follow asks for a snapshot of ns (of every namespace when ns is ""), to
// replicate it.
func (s *State) Follow(ns string) {
	s.mu.Lock()
	s.follow[ns] = true
	s.mu.Unlock()
	s.request(ns)
}

// request broadcasts state-req for ns ("" asks for every namespace).
func (s *State) request(ns string) {
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

// Snapshot returns a namespace held here. Its Owner is "" until a
// snapshot of it is heard (its deltas name no owner).
func (s *State) Snapshot(ns string) (state.Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.spaces[ns]; n != nil {
		return n.Snapshot(), true
	}
	return state.Snapshot{}, false
}

// Refused counts the writes heard and dropped: an invalid namespace, key,
// value or version, or a new key past state.MaxKeys.
func (s *State) Refused() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Set writes value (JSON) to key, locally first, then to every replica.
func (s *State) Set(ns, key string, value json.RawMessage) (state.Entry, error) {
	return s.write(deltaData{NS: ns, Key: key, Value: value})
}

// Delete writes a tombstone.
func (s *State) Delete(ns, key string) (state.Entry, error) {
	return s.write(deltaData{NS: ns, Key: key, Del: true})
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
	if err := state.CheckName(d.NS); err != nil {
		return state.Entry{}, err
	}
	s.mu.Lock()
	n := s.spaces[d.NS]
	if s.opts.StrictOwnership && (n == nil || n.Owner() != s.bus.SelfID()) {
		s.mu.Unlock()
		return state.Entry{}, fmt.Errorf("%w: %s", ErrNotOwned, d.NS)
	}
	first := n == nil
	if first {
		n = state.New(d.NS, "")
	}
	ver := min(s.clock+1, state.MaxVersion)
	e, err := put(n, state.Entry{Key: d.Key, Value: d.Value, Version: ver, Source: s.bus.SelfID(), Deleted: d.Del})
	if err == nil {
		s.clock, d.Ver = ver, ver
		if first {
			s.spaces[d.NS] = n
		}
	}
	s.mu.Unlock()
	if err != nil {
		return e, err
	}
	body, _ := json.Marshal(d)
	if _, err := s.bus.Send(SendOptions{Type: TypeStateDelta, Data: body}); err != nil {
		return e, err
	}
	if first {
		s.request(d.NS) // the rest of the namespace, from its owner
	}
	s.changed(d.NS, e)
	return e, nil
}

// put applies e to n by last-write-wins, whoever wrote it: the
// JavaScript bus's rule. It returns the stored entry and ErrStale when the
// stored one wins.
func put(n *state.Namespace, e state.Entry) (state.Entry, error) {
	d := state.Delta{NS: n.Name(), Key: e.Key, Value: e.Value, Version: e.Version, Deleted: e.Deleted, Source: e.Source}
	if err := d.Check(); err != nil {
		return state.Entry{}, err
	}
	cur, exists := n.Get(e.Key)
	switch {
	case exists && !state.Wins(e.Version, e.Source, cur.Version, cur.Source):
		return cur, state.ErrStale
	case !exists && n.Len() >= state.MaxKeys:
		return state.Entry{}, state.ErrFull
	}
	e.Open = false // busbar's notion; every key of a bedrock namespace is writable
	if e.Deleted {
		e.Value = nil
	}
	n.Merge(state.Snapshot{NS: n.Name(), Entries: []state.Entry{e}})
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
	first := n == nil
	if first {
		if !s.follow[""] && !s.follow[d.NS] || state.CheckName(d.NS) != nil {
			s.mu.Unlock()
			return // not followed
		}
		n = state.New(d.NS, "") // its owner is named by its first snapshot
	}
	entry, err := put(n, state.Entry{Key: d.Key, Value: d.Value, Version: d.Ver, Source: e.Src, Deleted: d.Del})
	switch {
	case err == nil:
		s.clock = max(s.clock, entry.Version) // only what is stored moves the clock
		if first {
			s.spaces[d.NS] = n
		}
	case !errors.Is(err, state.ErrStale):
		s.refused++
	}
	s.mu.Unlock()
	if err != nil {
		return
	}
	if first {
		// The first news of a namespace (an add-on that started empty
		// announces nothing until it writes): ask for the rest of it now
		// rather than at the next resync.
		s.request(d.NS)
	}
	s.changed(d.NS, entry)
}

func (s *State) onRequest(e *Envelope) {
	q, err := decodeStateRequest(e.Data)
	if err != nil {
		return
	}
	s.mu.Lock()
	var answer []string
	for ns, n := range s.spaces {
		if q.NS != "" && q.NS != ns {
			continue
		}
		// Ours; or the owner asks for its own namespace: it restarted.
		if o := n.Owner(); o == s.bus.SelfID() || o != "" && o == e.Src {
			answer = append(answer, ns)
		}
	}
	s.mu.Unlock()
	for _, ns := range answer {
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
	case n.Owner() == "":
		n = s.setOwner(n, e.Src)
	}
	var changed []state.Entry
	for _, en := range snap.Entries {
		en, err := put(n, en)
		switch {
		case err == nil:
			s.clock = max(s.clock, en.Version)
			changed = append(changed, en)
		case !errors.Is(err, state.ErrStale):
			s.refused++
		}
	}
	// Writes of ours the owner's snapshot lacks (a delta lost on the way
	// to the owner): only their writer can send them again, since a
	// delta's source is its envelope's src.
	var resend []deltaData
	if n.Owner() != s.bus.SelfID() && n.Owner() == e.Src {
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
		s.request(ns)
	}
}
