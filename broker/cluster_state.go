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
//
// A drop and a new owner are decided where they are asked for and
// published the same way; they merge by rules of their own (an
// incarnation, an owner's time stamp, tombstones: state_meta.go), and the
// digests carry them too, so a broker that missed one converges the same
// way as for a lost write.

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/auth"
	"busbar/state"
	"busbar/statestore"
	"busbar/wire"
)

// stateMsg is a namespace's entries as a broker publishes them: one write,
// or a page of a whole namespace; or, with no NS, a digest of the
// broker's namespaces (Whole: all of them in this one message).
//
// Epoch and OwnerAt are the namespace's record (nsMeta); Dropped is the
// sender's tombstone of NS: alone, a drop; with entries, a floor the
// receiver applies before it merges them. A digest carries every
// tombstone the sender keeps (Tombs).
type stateMsg struct {
	Broker  string        `json:"broker"`
	NS      string        `json:"ns"`
	Owner   string        `json:"owner"`
	Epoch   uint64        `json:"epoch,omitempty"`
	OwnerAt uint64        `json:"owner_at,omitempty"`
	Dropped uint64        `json:"dropped,omitempty"`
	Entries []state.Entry `json:"entries"`
	Digest  []nsDigest    `json:"digest,omitempty"`
	Tombs   []nsTomb      `json:"tombs,omitempty"`
	Whole   bool          `json:"whole,omitempty"`
}

// nsTomb is a tombstone as a digest carries it.
type nsTomb struct {
	NS    string `json:"ns"`
	Floor uint64 `json:"floor"`
}

// replica is a namespace as this broker publishes it: its snapshot, its
// record, and the floor of its tombstone (0: none).
type replica struct {
	snap    state.Snapshot
	meta    nsMeta
	dropped uint64
}

// nsDigest sums up a namespace: two brokers with the same entries, owner
// and incarnation have the same digest. Max is the highest version, Count
// the entries (tombstones included), Sum a hash of every entry's key,
// version, source and deletion, added up so the order of the entries does
// not matter.
type nsDigest struct {
	NS      string `json:"ns"`
	Max     uint64 `json:"max"`
	Count   int    `json:"count"`
	Sum     uint64 `json:"sum"`
	Owner   string `json:"owner,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	OwnerAt uint64 `json:"owner_at,omitempty"`
}

func digestOf(r *replica) nsDigest {
	snap := &r.snap
	d := nsDigest{NS: snap.NS, Count: len(snap.Entries), Owner: snap.Owner, Epoch: r.meta.Epoch, OwnerAt: r.meta.OwnerAt}
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

// publishDigest sends the digests of every namespace and every tombstone
// (the publisher's, every heartbeat), in as many messages as the payload
// limit needs, after forgetting the tombstones past their retention.
func (cl *cluster) publishDigest(now time.Time) {
	if n, err := cl.b.state.forgetTombstones(now, cl.opts.TombstoneRetention); err != nil {
		cl.b.log.Warn("bus: state tombstones past their retention not forgotten; retrying at the next heartbeat", "err", err)
	} else if n > 0 {
		cl.b.log.Info("bus: state tombstones past their retention forgotten", "count", n, "retention", cl.opts.TombstoneRetention)
	}
	budget := cl.maxPayload() - clusterPageSlack
	reps, tombs := cl.b.state.replicas()
	m := stateMsg{Broker: cl.b.opts.Name, Whole: true, Digest: []nsDigest{}}
	size := 0
	add := func(raw []byte) {
		if size > 0 && size+len(raw) > budget {
			m.Whole = false
			cl.publishState(m)
			m.Digest, m.Tombs, size = nil, nil, 0
		}
		size += len(raw) + 1
	}
	for _, t := range tombs {
		raw, _ := json.Marshal(t)
		add(raw)
		m.Tombs = append(m.Tombs, t)
	}
	for i := range reps {
		if len(reps[i].snap.Entries) == 0 {
			continue // as good as absent: a merge creates no empty namespace
		}
		d := digestOf(&reps[i])
		raw, _ := json.Marshal(d)
		add(raw)
		m.Digest = append(m.Digest, d)
	}
	cl.publishState(m)
}

// checkDigest compares a peer's digest with this broker's namespaces and
// publishes, whole, each that differs, or that the peer lacks: the peer
// merges what it lacks, and, as it compares this broker's digest in
// turn, publishes what this one lacks. A namespace goes at most once a
// heartbeat, however many peers differ.
//
// The peer's tombstones come first: a namespace this broker still holds
// that the peer dropped is dropped here, not republished.
func (cl *cluster) checkDigest(sm stateMsg) {
	cl.b.state.buryAll(sm.Broker, sm.Tombs, cl.b)
	theirs := map[string]nsDigest{}
	for _, d := range sm.Digest {
		theirs[d.NS] = d
	}
	now := time.Now()
	reps, _ := cl.b.state.replicas()
	for i := range reps {
		r := &reps[i]
		d, listed := theirs[r.snap.NS]
		if len(r.snap.Entries) == 0 || (!listed && !sm.Whole) || (listed && d == digestOf(r)) {
			continue
		}
		if cl.repairDue(r.snap.NS, now) {
			cl.b.log.Info("bus: state differs from another broker's; republishing the namespace", "broker", sm.Broker, "ns", r.snap.NS)
			cl.publishNamespace(*r)
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

// replicateState publishes a write this broker applied to n (its record
// m). Called under the state service's lock, so writes leave
// in the order they were applied.
func (cl *cluster) replicateState(n *state.Namespace, m nsMeta, e state.Entry) {
	cl.publishState(stateMsg{Broker: cl.b.opts.Name, NS: n.Name(), Owner: n.Owner(), Epoch: m.Epoch, OwnerAt: m.OwnerAt, Entries: []state.Entry{e}})
}

// replicateDrop publishes a drop this broker decided (its tombstone's
// floor). Called under the state service's lock.
func (cl *cluster) replicateDrop(ns string, floor uint64) {
	cl.publishState(stateMsg{Broker: cl.b.opts.Name, NS: ns, Dropped: floor})
}

// replicateOwner publishes a new owner this broker decided; called
// under the state service's lock.
func (cl *cluster) replicateOwner(ns, owner string, m nsMeta) {
	cl.publishState(stateMsg{Broker: cl.b.opts.Name, NS: ns, Owner: owner, Epoch: m.Epoch, OwnerAt: m.OwnerAt})
}

func (cl *cluster) publishState(m stateMsg) {
	body, err := wire.JSON(m)
	if err == nil {
		err = cl.publish(cl.subj.state+cl.b.opts.Name, nil, body)
	}
	if err != nil {
		cl.b.log.Warn("bus: state not published; the others get it at the next sync", "ns", m.NS, "err", err)
	}
}

// syncState asks the publisher to send every namespace (a broker joined or
// came back, or this one reconnected).
func (cl *cluster) syncState() { poke(cl.resync) }

// publishAllState sends every namespace, each in pages that fit the NATS
// payload limit (the publisher's).
func (cl *cluster) publishAllState() {
	reps, _ := cl.b.state.replicas()
	for _, r := range reps {
		cl.publishNamespace(r)
	}
}

// publishNamespace sends one namespace whole, in pages that fit the NATS
// payload limit.
func (cl *cluster) publishNamespace(r replica) {
	budget := cl.maxPayload() - clusterPageSlack
	m := stateMsg{Broker: cl.b.opts.Name, NS: r.snap.NS, Owner: r.snap.Owner, Epoch: r.meta.Epoch, OwnerAt: r.meta.OwnerAt, Dropped: r.dropped}
	size := 0
	for _, e := range r.snap.Entries {
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

// replicas returns every namespace as this broker publishes it, and
// every tombstone.
func (s *stateService) replicas() ([]replica, []nsTomb) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]replica, 0, len(s.spaces))
	for ns, n := range s.spaces {
		out = append(out, replica{snap: n.Snapshot(), meta: s.meta[ns], dropped: s.dropped[ns]})
	}
	tombs := make([]nsTomb, 0, len(s.dropped))
	for ns, floor := range s.dropped {
		tombs = append(tombs, nsTomb{NS: ns, Floor: floor})
	}
	return out, tombs
}

// buryAll applies another broker's tombstones (from its digest).
func (s *stateService) buryAll(from string, tombs []nsTomb, b *Broker) {
	if len(tombs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tombs {
		if state.CheckName(t.NS) != nil || t.Floor == 0 {
			b.log.Warn("bus: a state tombstone from another broker refused", "broker", from, "ns", t.NS)
			continue
		}
		if s.buryLocked(t.NS, t.Floor, b) {
			b.log.Info("bus: state namespace dropped by another broker; dropped here", "broker", from, "ns", t.NS)
		}
	}
}

// mergeRemote applies another broker's tombstone, record and entries of a
// namespace: the tombstone first (it may drop this broker's copy, and
// makes a copy it covers void), then the record by its rules (the later
// incarnation, the winning owner: state_meta.go), then the entries by the
// conflict rule, each stored before it is applied and told to the
// namespace's watchers, as a local write is. Ownership was checked where
// the write was made. A namespace new here is created with the owner and
// record its broker gave it.
func (s *stateService) mergeRemote(sm stateMsg, b *Broker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sm.Dropped > 0 && s.buryLocked(sm.NS, sm.Dropped, b) {
		b.log.Info("bus: state namespace dropped by another broker; dropped here", "broker", sm.Broker, "ns", sm.NS)
	}
	if s.buriedLocked(sm.NS, sm.Epoch) {
		return // a dropped incarnation: the sender drops it at our next digest
	}
	if err := auth.ValidNodeName(sm.Owner); err != nil {
		b.log.Warn("bus: state from another broker refused: its owner", "broker", sm.Broker, "ns", sm.NS, "err", err)
		return
	}
	n, meta := s.spaces[sm.NS], s.meta[sm.NS]
	created := n == nil
	if created {
		if len(sm.Entries) == 0 {
			return // a new owner of a namespace this broker lacks: it comes whole with its entries
		}
		n, meta = state.New(sm.NS, sm.Owner), nsMeta{Epoch: sm.Epoch, OwnerAt: sm.OwnerAt}
	} else {
		if !s.mergeMetaLocked(n, meta, sm, b) {
			return
		}
		n, meta = s.spaces[sm.NS], s.meta[sm.NS] // perhaps under a new owner
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
		m := meta
		m.Inherited = m.Inherited || !e.Open && e.Source != n.Owner() // a former owner's, or a concurrent creator's
		seq := n.Seq() + 1
		if err := s.persist(n, m, e, seq); err != nil {
			b.log.Error("state store write failed (a write from another broker)", "ns", sm.NS, "key", e.Key, "err", err)
			return // the next sync brings it again
		}
		meta = m
		s.meta[sm.NS] = meta
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

// mergeMetaLocked merges another broker's record of namespace n (this
// broker's record cur): the later incarnation, and the winning owner,
// which replaces n (its watchers told to resync). It reports false when
// the record could not be stored (the next digest brings it again).
func (s *stateService) mergeMetaLocked(n *state.Namespace, cur nsMeta, sm stateMsg, b *Broker) bool {
	m := cur
	m.Epoch = max(cur.Epoch, sm.Epoch)
	newOwner := false
	if ownerWins(sm.OwnerAt, sm.Owner, cur.OwnerAt, n.Owner()) {
		m.OwnerAt = sm.OwnerAt
		if sm.Owner != n.Owner() {
			m.Inherited, newOwner = true, true
		}
	}
	if m == cur {
		return true
	}
	snap := n.Snapshot()
	if newOwner {
		snap.Owner = sm.Owner
	}
	if s.store != nil {
		if err := s.store.SetMeta(statestore.Record{NS: snap.NS, Owner: snap.Owner, Seq: snap.Seq, Meta: m}); err != nil {
			b.log.Error("state store write failed (a namespace's record from another broker)", "ns", snap.NS, "err", err)
			return false
		}
	}
	if newOwner {
		b.log.Info("bus: state namespace given to another owner by another broker", "broker", sm.Broker, "ns", snap.NS, "owner", snap.Owner)
		s.setOwnerLocked(snap.NS, n, snap, m)
	} else {
		s.meta[snap.NS] = m
	}
	return true
}
