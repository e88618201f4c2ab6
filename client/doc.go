// Package client is busbar's Go API: one authenticated connection per
// process, owned scopes per plugin, named channels, and on each channel
// events (Subscribe, Send, Publish) and requests (Handle, Request).
//
//	c, err := client.Connect(ctx, client.Options{Server: "unix:///path/busbar.sock", Node: "billing", Credential: cred})
//	scope := c.Scope("invoices")           // one per plugin; Close revokes only its work
//	ch := scope.Channel("orders.created")
//	sub, err := ch.Subscribe(func(ctx context.Context, m *client.Message) { ... })
//	rcpt := ch.Send(ctx, "shipping", payload) // ACCEPTED, NO_SUBSCRIBER, NOT_CONNECTED, ...
//	reply, err := ch.Request(ctx, "shipping", payload)
//	res, err := ch.Publish(ctx, payload)  // one result per candidate node
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
package client
