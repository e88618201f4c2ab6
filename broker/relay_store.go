package broker

import "busbar/relay"

// RelayStore is the broker's relay store, or nil when the broker keeps
// none: for an edge that serves another relay protocol over the same
// inboxes, limits and group commit (package trueseal). The store closes
// with the broker, so such an edge stops before Shutdown.
func (b *Broker) RelayStore() *relay.Store { return b.relay.store }
