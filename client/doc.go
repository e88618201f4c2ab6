// Package client is busbar's Go API: one authenticated connection per
// process, owned scopes per plugin, named channels, and on each channel
// events (Subscribe, Send, Publish) and requests (Handle, Request).
//
//	c, err := client.Connect(ctx, client.Options{Server: "unix:///path/busbar.sock", Node: "billing", Credential: cred})
//	scope := c.Scope("invoices")           // one per plugin; Close revokes only its work
//	ch := scope.Channel("orders.created")
//	sub, err := ch.Subscribe(ctx, func(ctx context.Context, m *client.Message) { ... })
//	rcpt, err := ch.Send(ctx, "shipping", payload) // ACCEPTED, NO_SUBSCRIBER, NOT_CONNECTED, ...
//	reply, err := ch.Request(ctx, "shipping", payload)
//	res, err := ch.Publish(ctx, payload)  // one result per candidate node
//
// A call the client refuses before sending anything (a malformed channel
// or target, a payload over the limit, a closed scope or client) returns a
// plain error; what the broker or a handler answered is a Receipt result
// or a *RequestError. Channel's doc has the rule.
//
// Callbacks never run on the connection's goroutines: they run on an
// Executor (by default a bounded pool of workers fed by a bounded dispatch
// queue), so a stalled handler cannot stall the connection; a full queue
// answers BACKPRESSURED (events) or OVERLOAD (requests).
//
// Deadlines start when a call is made and cover queueing, dispatch and the
// wait: the remaining budget travels with the message (its ttl), and a
// message whose deadline passed while queued is never sent or dispatched.
// Messaging is live-only: nothing is replayed across connections.
//
// A client whose connection is lost dials its server list again (up to
// Options.MaxReconnects attempts, DefaultMaxReconnects unless set; none
// with NoReconnect) and restores its subscriptions, handlers,
// announcements and watches on the new connection; calls in flight fail
// with DISCONNECT, calls made meanwhile wait within their deadline
// (docs/client.md#reconnecting, reconnect.go).
//
// # Goroutines and ownership
//
// A Client runs a supervisor, started by Connect and joined by Close: it
// waits for the live connection to end, joins that connection's
// goroutines, then reconnects (and restores) or ends the client; it runs
// Options.OnConnEvent. Each connection (a conn: one per broker session,
// never revived) runs three goroutines, joined by the supervisor: the
// writer (the outbound queue's Run), the reader (readLoop: it owns the
// stream batch and every StateWatch's replica; a reconnect hands the
// replicas to the next reader by restoring before that reader starts) and
// heartbeat. Callbacks run on the Executor. Struct fields say who owns
// them: "guarded by mu", "owned by the reader", "set once …; read-only
// after".
//
// State is split by feature, each part owning its maps under its own lock:
//
//   - messaging and the call table: Client.mu (calls, scopes, subs,
//     subReg, handlers, the live connection and its up channel);
//   - discovery: discovery.mu (the ServiceWatches, the announcements);
//   - replicated state: stateClient.mu (the StateWatches) and
//     stateClient.clockMu (the write clocks).
//
// # Lock order
//
// A lock may be held while taking only the locks after it on its line:
//
//	Scope.mu       → Client.mu → the outbound queue's lock
//	discovery.mu   → Client.mu → the outbound queue's lock
//	stateClient.mu → Client.mu → the outbound queue's lock
//
// discovery.mu and stateClient.mu are never held together, and neither is
// taken while Client.mu is held: discovery and state open a call and
// queue it under their own lock (Client.startUnder, restoreOn), taking
// Client.mu inside it, so what they decide leaves in that order. The leaves are
// never held while taking another lock: stateClient.clockMu, a
// Subscription's or Registration's closed flag (atomic), the default
// pool's lock, and the outbound queue's own lock (inside package sendq).
// What is done under a lock never blocks: queueing is Enqueue (it refuses
// rather than waits), sends to a watch's channel are non-blocking, and no
// callback, Executor.Execute or socket write runs with any of these locks
// held. The client's end (Client.end) and a scope's closed flag are atomics
// written under their owner's lock and read anywhere, so no part needs
// another part's lock to ask whether the client or a scope is closed.
package client
