package broker

import (
	"fmt"
	"slices"
	"strings"

	"busbar/relay"
	"busbar/wire"
)

// The figures below are read by an operator's tools (package ops: the
// metrics and status endpoints of `busbar serve`) when they ask, never
// kept on the routing path: each takes the lock of the table it reads,
// once, at scrape time.

// Connections is the number of connections being served, registered or
// still logging in, in-process ones included.
func (b *Broker) Connections() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// Ready reports whether the broker takes new work: ErrClosed once
// Shutdown began; an error while its relay store refuses pushes after a
// failed write (a full disk), until the store writes again by itself.
func (b *Broker) Ready() error {
	if b.closing.Load() {
		return ErrClosed
	}
	if st := b.relay.store; st != nil {
		if err := st.Err(); err != nil {
			return fmt.Errorf("the relay refuses pushes until it can write again: %w", err)
		}
	}
	return nil
}

// Services returns the service registry's instances, sorted by service,
// then node (docs/discovery.md).
func (b *Broker) Services() []wire.ServiceInfo { return b.reg.services("") }

// NamespaceInfo is one state namespace, as an operator sees it.
type NamespaceInfo struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Keys  int    `json:"keys"`
	Seq   uint64 `json:"seq"` // the last delta's number
	// Watchers is the connections of this broker watching it.
	Watchers int `json:"watchers"`
}

// Namespaces returns the state namespaces this broker holds, sorted by
// name.
func (b *Broker) Namespaces() []NamespaceInfo {
	s := &b.state
	s.mu.Lock()
	out := make([]NamespaceInfo, 0, len(s.spaces))
	for name, n := range s.spaces {
		out = append(out, NamespaceInfo{Name: name, Owner: n.Owner(), Keys: n.Len(), Seq: n.Seq(), Watchers: len(s.watchers[name])})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b NamespaceInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// RelayStats returns the durable relay store's figures; ok is false when
// this broker is not a relay (no Options.RelayDir).
func (b *Broker) RelayStats() (st relay.Stats, ok bool) {
	if b.relay.store == nil {
		return relay.Stats{}, false
	}
	return b.relay.store.Stats(), true
}

// KeyInfo is one key of a state namespace, as an operator sees it.
type KeyInfo struct {
	Key     string `json:"key"`
	Version uint64 `json:"ver"`
	Source  string `json:"src"`
	Deleted bool   `json:"del,omitempty"`
	Open    bool   `json:"open,omitempty"`
	// Value is the value's JSON, clipped to maxValuePreview bytes.
	Value string `json:"value,omitempty"`
}

// maxValuePreview bounds the value NamespaceKeys shows of each key.
const maxValuePreview = 120

// NamespaceKeys returns the keys of namespace ns, sorted, when it holds
// at most limit of them; ok is false when it holds more (or none by that
// name): listing a large namespace would hold its lock too long.
func (b *Broker) NamespaceKeys(ns string, limit int) (keys []KeyInfo, ok bool) {
	s := &b.state
	s.mu.Lock()
	n := s.spaces[ns]
	if n == nil || n.Len() > limit {
		s.mu.Unlock()
		return nil, false
	}
	snap := n.Snapshot()
	s.mu.Unlock()
	keys = make([]KeyInfo, 0, len(snap.Entries))
	for _, e := range snap.Entries {
		k := KeyInfo{Key: e.Key, Version: e.Version, Source: e.Source, Deleted: e.Deleted, Open: e.Open, Value: string(e.Value)}
		if len(k.Value) > maxValuePreview {
			k.Value = k.Value[:maxValuePreview] + "…"
		}
		keys = append(keys, k)
	}
	return keys, true
}
