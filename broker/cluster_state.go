package broker

// Replicated state on a bus (docs/cluster.md#replicated-state). Every
// broker keeps every namespace in its own store, as a lone broker does.
// A write a broker accepts (its permissions and ownership checked there)
// is stored, applied and then published on <prefix>.state.<broker>; the
// other brokers apply it by the conflict rule alone (docs/state.md: the
// higher version wins, ties to the greater source), store it, and tell
// their watchers. Because that rule gives the same result in any order,
// a broker that missed writes (it was cut off, or restarting) converges
// by merging the others' namespaces: every broker publishes all of its
// namespaces when it sees a broker join or come back, and when it
// reconnects to NATS. Between those, a write lost in transit (NATS core
// is at most once) is found by digests: every heartbeat each broker
// publishes, on the same subject (so after every write it published), a
// digest of each namespace; a broker whose namespace differs from a
// peer's digest publishes that namespace whole, and the merge repairs
// whichever side lacked the write.

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/state"
	"busbar/wire"
)

// stateMsg is a namespace's entries as a broker publishes them: one write,
// or a page of a whole namespace; or, with no NS, a digest of the
// broker's namespaces (Whole: all of them in this one message).
type stateMsg struct {
	Broker  string        `json:"broker"`
	NS      string        `json:"ns"`
	Owner   string        `json:"owner"`
	Entries []state.Entry `json:"entries"`
	Digest  []nsDigest    `json:"digest,omitempty"`
	Whole   bool          `json:"whole,omitempty"`
}

// nsDigest sums up a namespace: two brokers with the same entries have
// the same digest. Max is the highest version, Count the entries
// (tombstones included), Sum a hash of every entry's key, version, source
// and deletion, added up so the order of the entries does not matter.
type nsDigest struct {
	NS    string `json:"ns"`
	Max   uint64 `json:"max"`
	Count int    `json:"count"`
	Sum   uint64 `json:"sum"`
}

func digestOf(snap *state.Snapshot) nsDigest {
	d := nsDigest{NS: snap.NS, Count: len(snap.Entries)}
	for _, e := range snap.Entries {
		d.Max = max(d.Max, e.Version)
		h := fnv.New64a()
		_, _ = h.Write([]byte(e.Key))
		_, _ = h.Write(strconv.AppendUint([]byte{0}, e.Version, 10))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(e.Source))
		if e.Deleted {
			_, _ = h.Write([]byte{1})
		}
		d.Sum += h.Sum64()
	}
	return d
}

// publishDigest sends the digests of every namespace (the publisher's,
// every heartbeat), in as many messages as the payload limit needs.
func (cl *cluster) publishDigest() {
	budget := int(cl.nc.MaxPayload()) - clusterPageSlack
	snaps := cl.b.state.snapshots()
	m := stateMsg{Broker: cl.b.opts.Name, Whole: true, Digest: []nsDigest{}}
	size := 0
	for i := range snaps {
		if len(snaps[i].Entries) == 0 {
			continue // as good as absent: a merge creates no empty namespace
		}
		d := digestOf(&snaps[i])
		raw, _ := json.Marshal(d)
		if size > 0 && size+len(raw) > budget {
			m.Whole = false
			cl.publishState(m)
			m.Digest, size = nil, 0
		}
		m.Digest = append(m.Digest, d)
		size += len(raw) + 1
	}
	cl.publishState(m)
}

// checkDigest compares a peer's digest with this broker's namespaces and
// publishes, whole, each that differs, or that the peer lacks: the peer
// merges what it lacks, and, as it compares this broker's digest in
// turn, publishes what this one lacks. A namespace goes at most once a
// heartbeat, however many peers differ.
func (cl *cluster) checkDigest(sm stateMsg) {
	theirs := map[string]nsDigest{}
	for _, d := range sm.Digest {
		theirs[d.NS] = d
	}
	now := time.Now()
	for _, snap := range cl.b.state.snapshots() {
		d, listed := theirs[snap.NS]
		if len(snap.Entries) == 0 || (!listed && !sm.Whole) || (listed && d == digestOf(&snap)) {
			continue
		}
		if cl.repairDue(snap.NS, now) {
			cl.b.log.Info("bus: state differs from another broker's; republishing the namespace", "broker", sm.Broker, "ns", snap.NS)
			cl.publishNamespace(snap)
		}
	}
}

// repairDue reports whether namespace ns may be republished now, and if
// so notes it.
func (cl *cluster) repairDue(ns string, now time.Time) bool {
	cl.smu.Lock()
	defer cl.smu.Unlock()
	if cl.repaired == nil {
		cl.repaired = map[string]time.Time{}
	}
	for k, at := range cl.repaired { // forget what is over a heartbeat old
		if now.Sub(at) >= cl.opts.Heartbeat {
			delete(cl.repaired, k)
		}
	}
	if _, recent := cl.repaired[ns]; recent {
		return false
	}
	cl.repaired[ns] = now
	cl.b.stats.stateRepairs.Add(1)
	return true
}

// replicateState publishes a write this broker applied to n. Safe on nil;
// called under the state service's lock, so writes leave in the order
// they were applied.
func (cl *cluster) replicateState(n *state.Namespace, e state.Entry) {
	if cl == nil {
		return
	}
	cl.publishState(stateMsg{Broker: cl.b.opts.Name, NS: n.Name(), Owner: n.Owner(), Entries: []state.Entry{e}})
}

func (cl *cluster) publishState(m stateMsg) {
	body, err := wire.JSON(m)
	if err == nil {
		err = cl.nc.Publish(cl.subj.state+cl.b.opts.Name, body)
	}
	if err != nil {
		cl.b.log.Warn("bus: state not published; the others get it at the next sync", "ns", m.NS, "err", err)
	}
}

// syncState asks the publisher to send every namespace (a broker joined or
// came back, or this one reconnected). Safe on nil.
func (cl *cluster) syncState() {
	if cl != nil {
		poke(cl.resync)
	}
}

// publishAllState sends every namespace, each in pages that fit the NATS
// payload limit (the publisher's).
func (cl *cluster) publishAllState() {
	for _, snap := range cl.b.state.snapshots() {
		cl.publishNamespace(snap)
	}
}

// publishNamespace sends one namespace whole, in pages that fit the NATS
// payload limit.
func (cl *cluster) publishNamespace(snap state.Snapshot) {
	budget := int(cl.nc.MaxPayload()) - clusterPageSlack
	m := stateMsg{Broker: cl.b.opts.Name, NS: snap.NS, Owner: snap.Owner}
	size := 0
	for _, e := range snap.Entries {
		raw, _ := json.Marshal(e)
		if size > 0 && size+len(raw) > budget {
			cl.publishState(m)
			m.Entries, size = nil, 0
		}
		m.Entries = append(m.Entries, e)
		size += len(raw) + 1
	}
	cl.publishState(m)
}

// onState merges another broker's entries (NATS's goroutine).
func (cl *cluster) onState(m *nats.Msg) {
	var sm stateMsg
	if err := json.Unmarshal(m.Data, &sm); err != nil || sm.Broker != sender(m) || sm.Broker == cl.b.opts.Name {
		return
	}
	if sm.NS == "" {
		cl.checkDigest(sm)
		return
	}
	if err := state.CheckName(sm.NS); err != nil {
		cl.b.log.Warn("bus: state from another broker refused", "broker", sm.Broker, "err", err)
		return
	}
	cl.b.state.mergeRemote(sm, cl.b)
}

// snapshots returns every namespace's snapshot.
func (s *stateService) snapshots() []state.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]state.Snapshot, 0, len(s.spaces))
	for _, n := range s.spaces {
		out = append(out, n.Snapshot())
	}
	return out
}

// mergeRemote applies another broker's entries by the conflict rule, each
// stored before it is applied and told to the namespace's watchers, as a
// local write is. Ownership was checked where the write was made. A
// namespace new here is created with the owner its broker gave it.
func (s *stateService) mergeRemote(sm stateMsg, b *Broker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.spaces[sm.NS]
	created := n == nil
	if created {
		n = state.New(sm.NS, sm.Owner)
	}
	for _, e := range sm.Entries {
		d := n.Delta(e, 0)
		if err := d.Check(); err != nil {
			b.log.Warn("bus: a state entry from another broker refused", "broker", sm.Broker, "ns", sm.NS, "err", err)
			continue
		}
		cur, ok := n.Get(e.Key)
		if ok && !state.Wins(e.Version, e.Source, cur.Version, cur.Source) {
			continue // this broker has it, or better
		}
		if !ok && n.Len() >= state.MaxKeys {
			b.log.Warn("bus: a state entry from another broker is over the namespace's key limit", "broker", sm.Broker, "ns", sm.NS)
			continue
		}
		if e.Deleted {
			e.Value = nil
		}
		seq := n.Seq() + 1
		if err := s.persist(n, e, seq); err != nil {
			b.log.Error("state store write failed (a write from another broker)", "ns", sm.NS, "key", e.Key, "err", err)
			return // the next sync brings it again
		}
		if created {
			s.spaces[sm.NS] = n
			s.owned[sm.Owner]++
			created = false
		}
		n.Commit(e)
		n.Advance()
		s.notifyLocked(n.Delta(e, seq))
	}
}
