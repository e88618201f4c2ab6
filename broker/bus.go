package broker

import (
	"time"

	"busbar/internal/sendq"
	"busbar/state"
	"busbar/wire"
)

// bus is what the broker asks of the other brokers of a bus: routing's
// questions (where a node, a service's members, a channel's subscribers
// and a publication's candidates are), the link a message for another
// broker's node is put into, the directory's share, the state's
// replication and leaving. A broker on its own has alone, which answers
// that there are no other brokers, so no caller checks for a bus; joined
// through NATS it has the cluster (cluster.go).
//
// The cluster's own files, and the durable relay's forwarding to a
// device's home broker (relay.go, relay_edge.go: reached only once a home
// on another broker was found), use Broker.cl directly.
type bus interface {
	joined() bool

	// Routing (route.go, groups.go, queues.go).
	linkTo(broker string) dest // nil when leaving
	remoteNode(node string) (shareNode, bool)
	serviceMembers(service string) []member
	subscribedBrokers(channel string) []string
	plainSubscribers(broker, channel string) bool
	publishCandidates(channel string) map[string][]string
	queueMembers(channel string) []remoteMember
	maxPayload() int
	frameFits(f *sendq.Frame) bool

	// The directory (directory.go, control.go, handshake.go).
	changed()
	claim(c *conn)
	isPeer(name string) bool
	remoteNodes() map[string]shareNode
	remoteServices() []wire.ServiceInfo
	eachLink(fn func(*endpoint)) // under the links' lock: fn must not take it

	// Replicated state (statesvc.go, stateadmin.go, state_meta.go).
	replicateState(n *state.Namespace, m nsMeta, e state.Entry)
	replicateDrop(ns string, floor uint64)
	replicateOwner(ns, owner string, m nsMeta)
	tombstoneRetention() time.Duration

	leave()
}

// alone is the bus of a broker on its own: no other broker, no link, and
// nothing to tell anybody.
type alone struct{}

func (alone) joined() bool                                         { return false }
func (alone) linkTo(string) dest                                   { return nil }
func (alone) remoteNode(string) (shareNode, bool)                  { return shareNode{}, false }
func (alone) serviceMembers(string) []member                       { return nil }
func (alone) subscribedBrokers(string) []string                    { return nil }
func (alone) plainSubscribers(string, string) bool                 { return false }
func (alone) publishCandidates(string) map[string][]string         { return nil }
func (alone) queueMembers(string) []remoteMember                   { return nil }
func (alone) maxPayload() int                                      { return wire.MaxMessageBytes }
func (alone) frameFits(*sendq.Frame) bool                          { return true }
func (alone) changed()                                             {}
func (alone) claim(*conn)                                          {}
func (alone) isPeer(string) bool                                   { return false }
func (alone) remoteNodes() map[string]shareNode                    { return nil }
func (alone) remoteServices() []wire.ServiceInfo                   { return nil }
func (alone) eachLink(func(*endpoint))                             {}
func (alone) replicateState(*state.Namespace, nsMeta, state.Entry) {}
func (alone) replicateDrop(string, uint64)                         {}
func (alone) replicateOwner(string, string, nsMeta)                {}
func (alone) tombstoneRetention() time.Duration                    { return 0 }
func (alone) leave()                                               {}

// The cluster's side of bus that cluster*.go does not define as such.

func (cl *cluster) joined() bool { return true }

func (cl *cluster) linkTo(broker string) dest {
	if l := cl.link(broker); l != nil {
		return l
	}
	return nil // not a nil *link in an interface
}

func (cl *cluster) eachLink(fn func(*endpoint)) {
	cl.lmu.Lock()
	defer cl.lmu.Unlock()
	for _, l := range cl.links {
		fn(&l.endpoint)
	}
}

func (cl *cluster) tombstoneRetention() time.Duration { return cl.opts.TombstoneRetention }
