// Package jsreplica is a model, in Go, of the JavaScript bus's replicated
// state (the State of bedrock-core's sync package, which seed 000
// describes), for tests that need peers behaving exactly as JavaScript
// add-ons do: a full mirror of every namespace, writes open to every
// add-on unless StrictOwnership, last-write-wins on (ver, src), snapshots
// answered only for owned, non-empty namespaces, and nothing announced at
// start by an add-on whose namespaces are empty. It is not busbar's state
// (package bedrock's State is); docs/bedrock.md#tests says what was
// checked against the JavaScript code itself.
package jsreplica

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"busbar/bedrock"
)

// Options are the JavaScript StateOptions.
type Options struct {
	OwnedNamespaces []string // default: the add-on's id
	StrictOwnership bool     // writes outside OwnedNamespaces fail
}

// Entry is a stored entry.
type Entry struct {
	Value json.RawMessage
	Ver   uint64
	Src   string
	Del   bool
}

// Replica is one add-on's state on its bus.
type Replica struct {
	bus    *bedrock.Bus
	owned  []string
	strict bool

	mu    sync.Mutex
	clock uint64
	store map[string]map[string]Entry
	stops []func()
}

// ErrNotOwned is a write refused by StrictOwnership (the JavaScript code
// throws).
var ErrNotOwned = errors.New("jsreplica: cannot write to namespace: not owned by this node (strictOwnership is enabled)")

// New returns a replica on bus, not started.
func New(bus *bedrock.Bus, opts Options) *Replica {
	owned := opts.OwnedNamespaces
	if owned == nil {
		owned = []string{bus.SelfID()}
	}
	return &Replica{bus: bus, owned: owned, strict: opts.StrictOwnership, store: map[string]map[string]Entry{}}
}

// Start registers the handlers, asks every peer for its state ({}) and
// broadcasts the owned namespaces that are not empty.
func (r *Replica) Start() {
	r.stops = append(r.stops,
		r.bus.On(bedrock.TypeStateDelta, r.onDelta),
		r.bus.On(bedrock.TypeStateRequest, r.onRequest),
		r.bus.On(bedrock.TypeStateSnapshot, r.onSnapshot))
	_, _ = r.bus.Send(bedrock.SendOptions{Type: bedrock.TypeStateRequest, Data: json.RawMessage(`{}`)})
	for _, ns := range r.owned {
		r.sendSnapshot(ns, "")
	}
}

// Stop removes the handlers.
func (r *Replica) Stop() {
	for _, stop := range r.stops {
		stop()
	}
	r.stops = nil
}

// Set writes a key and broadcasts the delta.
func (r *Replica) Set(ns, key string, value json.RawMessage) error {
	return r.write(ns, key, Entry{Value: value})
}

// Delete writes a tombstone and broadcasts the delta.
func (r *Replica) Delete(ns, key string) error {
	return r.write(ns, key, Entry{Del: true})
}

func (r *Replica) write(ns, key string, e Entry) error {
	if r.strict && !slices.Contains(r.owned, ns) {
		return ErrNotOwned
	}
	r.mu.Lock()
	r.clock++
	e.Ver, e.Src = r.clock, r.bus.SelfID()
	r.apply(ns, key, e)
	r.mu.Unlock()
	d := map[string]any{"ns": ns, "key": key, "ver": e.Ver}
	if e.Del {
		d["del"] = true
	} else {
		d["value"] = e.Value
	}
	body, _ := json.Marshal(d)
	_, err := r.bus.Send(bedrock.SendOptions{Type: bedrock.TypeStateDelta, Data: body})
	return err
}

// Get returns a key's entry (tombstones included).
func (r *Replica) Get(ns, key string) (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.store[ns][key]
	return e, ok
}

// Namespace returns a copy of a namespace's entries, tombstones included.
func (r *Replica) Namespace(ns string) map[string]Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Entry{}
	for k, e := range r.store[ns] {
		out[k] = e
	}
	return out
}

// apply stores e when it wins. Called with r.mu held.
func (r *Replica) apply(ns, key string, e Entry) {
	m := r.store[ns]
	if m == nil {
		m = map[string]Entry{}
		r.store[ns] = m
	}
	if cur, ok := m[key]; ok && !(e.Ver > cur.Ver || e.Ver == cur.Ver && e.Src > cur.Src) {
		return
	}
	if e.Del {
		e.Value = nil
	}
	m[key] = e
}

func (r *Replica) onDelta(env *bedrock.Envelope) {
	var d struct {
		NS    *string         `json:"ns"`
		Key   *string         `json:"key"`
		Ver   *float64        `json:"ver"`
		Value json.RawMessage `json:"value"`
		Del   bool            `json:"del"`
	}
	if json.Unmarshal(env.Data, &d) != nil || d.NS == nil || d.Key == nil || d.Ver == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock = max(r.clock, uint64(*d.Ver))
	r.apply(*d.NS, *d.Key, Entry{Value: d.Value, Ver: uint64(*d.Ver), Src: env.Src, Del: d.Del})
}

func (r *Replica) onRequest(env *bedrock.Envelope) {
	var q struct {
		NS *string `json:"ns"`
	}
	_ = json.Unmarshal(env.Data, &q)
	for _, ns := range r.owned {
		if q.NS == nil || *q.NS == ns {
			r.sendSnapshot(ns, env.Src)
		}
	}
}

// snapEntry is an entry of a state-snapshot: {k, v?, ver, src, del?}.
type snapEntry struct {
	K   string          `json:"k"`
	V   json.RawMessage `json:"v,omitempty"`
	Ver uint64          `json:"ver"`
	Src string          `json:"src"`
	Del bool            `json:"del,omitempty"`
}

// sendSnapshot sends ns to dst ("" broadcasts), unless it is empty.
func (r *Replica) sendSnapshot(ns, dst string) {
	r.mu.Lock()
	var entries []snapEntry
	for k, e := range r.store[ns] {
		entries = append(entries, snapEntry{K: k, V: e.Value, Ver: e.Ver, Src: e.Src, Del: e.Del})
	}
	r.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	body, _ := json.Marshal(map[string]any{"ns": ns, "entries": entries})
	_, _ = r.bus.Send(bedrock.SendOptions{Dst: dst, Type: bedrock.TypeStateSnapshot, Data: body})
}

func (r *Replica) onSnapshot(env *bedrock.Envelope) {
	var s struct {
		NS      *string     `json:"ns"`
		Entries []snapEntry `json:"entries"`
	}
	if json.Unmarshal(env.Data, &s) != nil || s.NS == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range s.Entries {
		r.clock = max(r.clock, e.Ver)
		r.apply(*s.NS, e.K, Entry{Value: e.V, Ver: e.Ver, Src: e.Src, Del: e.Del})
	}
}
