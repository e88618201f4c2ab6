// Package state is busbar's replicated key–value state machine
// (docs/state.md), with no I/O: the broker's store, every client replica,
// the bedrock bus and the tests run the same rules.
//
// A namespace holds entries (key, value, version, source, deleted, open).
// Versions are Lamport clocks: a writer's clock is max(its own, every
// version it has seen) + 1. A delta applies only when its (version,
// source) is greater than the stored entry's — higher version, or the same
// version from the greater source id — so every replica that has seen the
// same deltas holds the same entries, whatever the order they came in.
// Deletes are versioned tombstones, so an older write cannot resurrect a
// deleted key.
//
// A namespace belongs to its owner (the node that created it): only the
// owner's deltas apply, except on keys the owner opened for every writer.
// A refused foreign write is counted, never applied.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// Limits (documented in docs/state.md).
const (
	MaxKeyLen       = 256      // bytes of a key
	MaxValueBytes   = 64 << 10 // bytes of a value's JSON encoding
	MaxKeys         = 16384    // entries (tombstones included) per namespace
	MaxNamespaceLen = 128      // bytes of a namespace name
	// MaxVersion is the highest version: 2^53-1, the largest integer a
	// JavaScript peer (the bedrock bus) holds exactly
	// (docs/state.md#the-conflict-rule).
	MaxVersion = 1<<53 - 1
)

// Entry is one key of a namespace as a snapshot carries it: {k, v, ver,
// src, del, open} (docs/state.md#the-model).
type Entry struct {
	Key     string          `json:"k"`
	Value   json.RawMessage `json:"v,omitempty"`
	Version uint64          `json:"ver"`
	Source  string          `json:"src"`
	Deleted bool            `json:"del,omitempty"`
	Open    bool            `json:"open,omitempty"` // every node may write this key
}

// Delta is one write, {ns, key, value?, ver, del?} (docs/state.md#the-model).
// Source is the writer, stamped by the broker from the authenticated node;
// Open, only from the owner, opens the key for every writer; Seq is the
// broker's sequence number of the delta in its namespace (0 on a write
// from a client), which lets a replica notice a gap.
type Delta struct {
	NS      string          `json:"ns"`
	Key     string          `json:"key"`
	Value   json.RawMessage `json:"value,omitempty"`
	Version uint64          `json:"ver"`
	Deleted bool            `json:"del,omitempty"`
	Source  string          `json:"src,omitempty"`
	Open    bool            `json:"open,omitempty"`
	Seq     uint64          `json:"seq,omitempty"`
}

// Snapshot is a namespace's entries, {ns, entries}, with its owner and the
// sequence number of the last delta it includes (docs/state.md#the-model).
type Snapshot struct {
	NS      string  `json:"ns"`
	Owner   string  `json:"owner"`
	Seq     uint64  `json:"seq"`
	Entries []Entry `json:"entries"`
}

// Why a delta did not apply.
var (
	ErrStale   = errors.New("state: superseded by a newer or equal version")
	ErrForeign = errors.New("state: key is not open and the writer does not own the namespace")
	ErrFull    = errors.New("state: namespace is full")
	ErrInvalid = errors.New("state: invalid delta")
)

// Wins reports whether a write (ver, src) beats the stored (sver, ssrc):
// a higher version, or an equal one from the greater source.
func Wins(ver uint64, src string, sver uint64, ssrc string) bool {
	return ver > sver || ver == sver && src > ssrc
}

// CheckName validates a namespace name: 1 to MaxNamespaceLen bytes of
// UTF-8 with no control characters or whitespace.
func CheckName(ns string) error {
	if ns == "" || len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w: a namespace name must be 1 to %d bytes", ErrInvalid, MaxNamespaceLen)
	}
	return checkText("namespace name", ns)
}

// CheckKey validates a key: 1 to MaxKeyLen bytes of UTF-8 with no control
// characters or whitespace.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: a key must be 1 to %d bytes", ErrInvalid, MaxKeyLen)
	}
	return checkText("key", key)
}

func checkText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalid, what)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			return fmt.Errorf("%w: %s holds whitespace or a control character", ErrInvalid, what)
		}
	}
	return nil
}

// Check validates a delta's fields and value.
func (d *Delta) Check() error {
	if err := CheckName(d.NS); err != nil {
		return err
	}
	if err := CheckKey(d.Key); err != nil {
		return err
	}
	if d.Version == 0 || d.Version > MaxVersion {
		return fmt.Errorf("%w: version must be 1 to %d", ErrInvalid, uint64(MaxVersion))
	}
	if d.Deleted && len(d.Value) > 0 {
		return fmt.Errorf("%w: a delete carries no value", ErrInvalid)
	}
	if !d.Deleted {
		if len(d.Value) == 0 {
			return fmt.Errorf("%w: a write needs a value (JSON)", ErrInvalid)
		}
		if len(d.Value) > MaxValueBytes {
			return fmt.Errorf("%w: value is %d bytes, over the limit of %d", ErrInvalid, len(d.Value), MaxValueBytes)
		}
		if !json.Valid(d.Value) {
			return fmt.Errorf("%w: value is not JSON", ErrInvalid)
		}
	}
	return nil
}

// Namespace is one namespace's state. It is not safe for concurrent use.
type Namespace struct {
	name    string
	owner   string
	seq     uint64
	clock   uint64 // the highest version seen
	entries map[string]*Entry
	refused int64 // foreign writes dropped
}

// New returns an empty namespace owned by owner.
func New(name, owner string) *Namespace {
	return &Namespace{name: name, owner: owner, entries: map[string]*Entry{}}
}

// FromSnapshot returns the namespace a snapshot describes.
func FromSnapshot(s Snapshot) *Namespace {
	n := New(s.NS, s.Owner)
	n.seq = s.Seq
	for _, e := range s.Entries {
		n.entries[e.Key] = &e
		n.clock = max(n.clock, e.Version)
	}
	return n
}

// Name, Owner, Seq (the last applied delta's sequence number), Clock (the
// highest version seen), Len (entries, tombstones included) and Refused
// (foreign writes dropped) describe the namespace.
func (n *Namespace) Name() string   { return n.name }
func (n *Namespace) Owner() string  { return n.owner }
func (n *Namespace) Seq() uint64    { return n.seq }
func (n *Namespace) Clock() uint64  { return n.clock }
func (n *Namespace) Len() int       { return len(n.entries) }
func (n *Namespace) Refused() int64 { return n.refused }

// Get returns a key's entry (a tombstone reports Deleted).
func (n *Namespace) Get(key string) (Entry, bool) {
	e, ok := n.entries[key]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Apply applies a delta from d.Source under the rules above and returns
// the entry now stored for the key. It returns ErrForeign (counted) for a
// write the owner did not allow, ErrStale (with the stored entry) when
// the stored entry wins, and ErrFull when a new key would pass MaxKeys.
// Only the owner may open a key; an open key stays open.
func (n *Namespace) Apply(d Delta) (Entry, error) {
	e, err := n.Decide(d)
	if err == nil {
		n.Commit(e)
	}
	return e, err
}

// Decide is Apply without the change: the entry the delta would store, or
// why it would not. A store that must persist before it applies calls
// Decide, persists, then Commit.
func (n *Namespace) Decide(d Delta) (Entry, error) {
	if err := d.Check(); err != nil {
		return Entry{}, err
	}
	// The clock moves only with what is stored (Commit): a refused write
	// must not push it.
	cur, exists := n.entries[d.Key]
	if d.Source != n.owner && (!exists || !cur.Open) {
		n.refused++
		return Entry{}, ErrForeign
	}
	if exists && !Wins(d.Version, d.Source, cur.Version, cur.Source) {
		return *cur, ErrStale
	}
	if !exists && len(n.entries) >= MaxKeys {
		return Entry{}, ErrFull
	}
	e := Entry{Key: d.Key, Value: d.Value, Version: d.Version, Source: d.Source, Deleted: d.Deleted,
		Open: exists && cur.Open || d.Open && d.Source == n.owner}
	if e.Deleted {
		e.Value = nil
	}
	return e, nil
}

// Commit stores an entry Decide returned.
func (n *Namespace) Commit(e Entry) {
	n.clock = max(n.clock, e.Version)
	n.entries[e.Key] = &e
}

// Delta is the delta that reproduces e in this namespace, with seq.
func (n *Namespace) Delta(e Entry, seq uint64) Delta {
	return Delta{NS: n.name, Key: e.Key, Value: e.Value, Version: e.Version, Deleted: e.Deleted, Source: e.Source, Open: e.Open, Seq: seq}
}

// Advance records that the delta with sequence number seq was applied
// (the broker numbers deltas as it applies them).
func (n *Namespace) Advance() uint64 {
	n.seq++
	return n.seq
}

// Snapshot returns every entry, sorted by key.
func (n *Namespace) Snapshot() Snapshot {
	s := Snapshot{NS: n.name, Owner: n.owner, Seq: n.seq, Entries: make([]Entry, 0, len(n.entries))}
	for _, k := range slices.Sorted(maps.Keys(n.entries)) {
		s.Entries = append(s.Entries, *n.entries[k])
	}
	return s
}

// Merge applies a snapshot's entries by the same rule (an entry replaces
// the stored one only when it wins) and returns those that changed: what
// a replica that missed deltas must report after asking for a snapshot.
// Ownership is not re-checked: a snapshot carries what its source applied.
func (n *Namespace) Merge(s Snapshot) []Entry {
	var changed []Entry
	for _, e := range s.Entries {
		n.clock = max(n.clock, e.Version)
		cur, ok := n.entries[e.Key]
		if ok && !Wins(e.Version, e.Source, cur.Version, cur.Source) {
			continue
		}
		n.entries[e.Key] = &e
		changed = append(changed, e)
	}
	n.seq = max(n.seq, s.Seq)
	return changed
}

// Follow is how a replica takes a delta the broker numbered (Seq > 0). A
// delta it already has (Seq at or below its own) is ignored; one that
// skips a number is not applied and gap is true: the replica missed
// something and must ask for a snapshot (and Merge it). Otherwise the
// delta applies by the version rule — the broker already decided
// ownership — and changed reports whether the stored entry moved.
func (n *Namespace) Follow(d Delta) (e Entry, changed, gap bool) {
	switch {
	case d.Seq <= n.seq:
		return Entry{}, false, false
	case d.Seq > n.seq+1:
		return Entry{}, false, true
	}
	n.seq = d.Seq
	n.clock = max(n.clock, d.Version)
	if cur, ok := n.entries[d.Key]; ok && !Wins(d.Version, d.Source, cur.Version, cur.Source) {
		return Entry{}, false, false
	}
	e = Entry{Key: d.Key, Value: d.Value, Version: d.Version, Source: d.Source, Deleted: d.Deleted, Open: d.Open}
	if e.Deleted {
		e.Value = nil
	}
	n.entries[d.Key] = &e
	return e, true, false
}

// Query is the body of a get, open, watch or unwatch request: a namespace
// and, for get and open, a key.
type Query struct {
	NS  string `json:"ns"`
	Key string `json:"key,omitempty"`
}

// Transfer asks the broker to make Owner the owner of namespace NS.
type Transfer struct {
	NS    string `json:"ns"`
	Owner string `json:"owner"`
}

// Result answers a write, an open or a get of one key: the entry now
// stored (Found false: the key was never written), and for a write whether
// it applied (false: a newer or equal version won; Entry is the winner).
type Result struct {
	Applied bool  `json:"applied"`
	Found   bool  `json:"found"`
	Entry   Entry `json:"entry"`
}
