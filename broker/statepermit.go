package broker

import (
	"busbar/auth"
	"busbar/state"
)

// Replicated state is guarded by the principal's state lists, matched
// against namespace names (auth.Permissions.AllowsNamespace):
//
//   - state-read: bus.state.get (a key, a namespace) and bus.state.watch.
//     A get of every namespace answers only those the node may read.
//   - state-write: bus.state.set, a write or a delete. A write that would
//     create the namespace (its first write makes the node its owner)
//     needs state-admin too.
//   - state-admin: bus.state.open, and creating a namespace.
//
// Permission is checked before ownership: a node that may write a
// namespace still writes only its own namespaces and the keys their
// owners opened. bus.state.unwatch needs nothing: it only ends what the
// node was allowed to start. In-process connections may do everything,
// as with channels. A refusal is REJECTED "not permitted to <action>
// namespace <ns>", answered, counted and logged like a channel's.

// mayState reports whether c may do the state action a on namespace ns.
// Permissions are fixed at the handshake and state is not the hot path,
// so this asks them every time rather than caching as conn.allows does.
func mayState(c *conn, a auth.Action, ns string) bool {
	return c.perms == nil || c.perms.AllowsNamespace(a, ns)
}

// permitState checks ns's syntax, then c's permission for a on it.
func permitState(c *conn, a auth.Action, ns string) *refusal {
	if err := state.CheckName(ns); err != nil {
		return rejectf("%v", err)
	}
	if !mayState(c, a, ns) {
		return rejectf("not permitted to %s namespace %s", a, ns)
	}
	return nil
}

// permitCreate is the refusal of a first write to ns by a node that may
// write it but not create it.
func permitCreate(c *conn, ns string) *refusal {
	if !mayState(c, auth.ActionStateAdmin, ns) {
		return rejectf("not permitted to %s namespace %s, which its first write would create", auth.ActionStateAdmin, ns)
	}
	return nil
}

// hideValue drops the value from the answer to a write when c may not
// read the namespace and the value is not the one c just wrote: the
// winner of a write that lost, or the key an open kept. A writer that may
// not read still learns the entry's version and source, which it needs to
// write past it.
func hideValue(c *conn, ns string, r state.Result, wrote bool) state.Result {
	if !(wrote && r.Applied) && !mayState(c, auth.ActionStateRead, ns) {
		r.Entry.Value = nil
	}
	return r
}
