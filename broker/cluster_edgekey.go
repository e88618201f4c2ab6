package broker

// An edge protocol's relay key on a bus (docs/trueseal.md#the-relay-key-on-a-bus).
// A protocol whose clients pin the relay's static key (trueseal's) can
// let a client use any broker only if every broker serving it holds the
// same key. Each such broker names a fingerprint of its key in every page
// of its share of the directory (sharePage.EdgeKeys), so every broker
// sees every other's. A broker that joins (JoinEdgeKey) waits until it
// has heard every live peer's share since it announced its own, and
// refuses (an *EdgeKeyError) when one names another fingerprint for the
// same protocol: the broker that joins with the odd key is the one that
// does not serve. A broker already serving warns, naming both
// fingerprints, and goes on serving its clients.

import (
	"context"
	"fmt"
	"time"
)

// EdgeKeyCheckHeartbeats is how many of the bus's heartbeats
// (ClusterOptions.Heartbeat) JoinEdgeKey waits after announcing its key:
// every live broker publishes its share once a heartbeat, so by then
// each has been heard at least once since, with its key.
const EdgeKeyCheckHeartbeats = 2

// EdgeKeyError: a broker of the bus announces another key for an edge
// protocol than this broker's.
type EdgeKeyError struct {
	Proto  string // the edge protocol ("trueseal")
	Broker string // the other broker
	Theirs string // its fingerprint
	Ours   string // this broker's
}

func (e *EdgeKeyError) Error() string {
	return fmt.Sprintf("broker %s on the bus holds the %s relay key with fingerprint %s, this broker the one with fingerprint %s: clients pin one key, so every broker serving %s needs the same key",
		e.Broker, e.Proto, e.Theirs, e.Ours, e.Proto)
}

// JoinEdgeKey announces fingerprint as this broker's key for edge
// protocol proto to the bus and checks it against the other brokers':
// it returns an *EdgeKeyError, and withdraws the announcement, when one
// of them holds another. It waits EdgeKeyCheckHeartbeats heartbeats (or
// less, at the first difference heard), or until ctx ends. A lone broker,
// or a bus that names no relay brokers (each broker then keeps the
// inboxes of what it is pushed, and a client uses one broker), has
// nothing to check: nil at once.
func (b *Broker) JoinEdgeKey(ctx context.Context, proto, fingerprint string) error {
	cl := b.cl
	if cl == nil || len(cl.opts.Relays) == 0 {
		return nil
	}
	cl.mu.Lock()
	if cl.edgeKeys == nil {
		cl.edgeKeys = map[string]string{}
	}
	cl.edgeKeys[proto] = fingerprint
	cl.edgeVer++
	ver := cl.edgeVer
	cl.mu.Unlock()
	cl.changed() // published within clusterPublishGap
	// Checked once the bus has the announcement, so a broker already
	// serving with another key logs the difference too.
	lease := time.NewTimer(cl.opts.Lease)
	defer lease.Stop()
	tick := time.NewTicker(cl.opts.Heartbeat) // another waiter may have taken the poke
	defer tick.Stop()
	for cl.edgeShared.Load() < ver {
		select {
		case <-cl.edgeSent:
		case <-tick.C:
		case <-lease.C:
			cl.withdrawEdgeKey(proto)
			return fmt.Errorf("broker: the bus did not take this broker's %s key within the lease (%v): cannot check it against the other brokers'", proto, cl.opts.Lease)
		case <-ctx.Done():
			cl.withdrawEdgeKey(proto)
			return ctx.Err()
		}
	}
	t := time.NewTimer(EdgeKeyCheckHeartbeats * cl.opts.Heartbeat)
	defer t.Stop()
	for {
		if err := cl.edgeKeyConflict(proto, fingerprint); err != nil {
			cl.withdrawEdgeKey(proto)
			return err
		}
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			cl.withdrawEdgeKey(proto)
			return ctx.Err()
		case <-cl.edgeHeard:
		}
	}
}

// withdrawEdgeKey stops announcing a key for proto: a broker that does
// not serve it must not make the next one that joins with the bus's key
// refuse.
func (cl *cluster) withdrawEdgeKey(proto string) {
	cl.mu.Lock()
	delete(cl.edgeKeys, proto)
	cl.edgeVer++
	cl.mu.Unlock()
	cl.changed()
}

// edgeKeyConflict returns the first peer's other key for proto, or nil.
func (cl *cluster) edgeKeyConflict(proto, ours string) *EdgeKeyError {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	for name, pr := range cl.peers {
		if theirs, ok := pr.edgeKeys[proto]; ok && theirs != ours {
			return &EdgeKeyError{Proto: proto, Broker: name, Theirs: theirs, Ours: ours}
		}
	}
	return nil
}

// edgeKeysLocked returns a copy of this broker's announced keys (cl.mu
// held), for its share.
func (cl *cluster) edgeKeysLocked() map[string]string {
	if len(cl.edgeKeys) == 0 {
		return nil
	}
	out := make(map[string]string, len(cl.edgeKeys))
	for k, v := range cl.edgeKeys {
		out[k] = v
	}
	return out
}

// heardEdgeKeysLocked takes the keys a peer's page names (cl.mu held) and
// returns the differences from this broker's own not yet warned about.
func (cl *cluster) heardEdgeKeysLocked(name string, pr *peer, keys map[string]string) []*EdgeKeyError {
	pr.edgeKeys = keys
	var diff []*EdgeKeyError
	for proto, theirs := range keys {
		ours, ok := cl.edgeKeys[proto]
		if !ok || ours == theirs || pr.warned[proto] == theirs {
			continue
		}
		if pr.warned == nil {
			pr.warned = map[string]string{}
		}
		pr.warned[proto] = theirs
		diff = append(diff, &EdgeKeyError{Proto: proto, Broker: name, Theirs: theirs, Ours: ours})
	}
	return diff
}
