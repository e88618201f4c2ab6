// Package broker is busbar's broker: it takes authenticated connections
// from nodes (processes), keeps a directory of them with heartbeat leases,
// and routes events, requests, replies and publications between them with
// the guarantees of the channel messaging contract (docs/messaging.md).
//
// # Shape
//
// The broker serves connections, not listeners: every transport (Unix
// socket, TCP, TLS, in-process pipe) ends in ServeConn. Each connection has
// two goroutines: the one that called ServeConn reads frames and routes them,
// and a writer drains the connection's bounded outbound queue, flushing once
// per batch. Nothing blocks a reader on a slow peer: a full queue answers
// BACKPRESSURED, and a peer that stops reading is disconnected as a slow
// consumer.
//
// Every frame takes one path: the reader, dispatch (route.go), one handler
// per kind; every "no" is a *refusal that answer (refusal.go) turns into
// what the sender expects. Routing resolves a target to a connection
// through the directory. With Options.Cluster the broker joins a bus of
// brokers through NATS (cluster*.go, docs/cluster.md): the directory and
// the registry are bus-wide, and a node on another broker resolves to the
// link to that broker, a connection whose writer publishes to NATS, so
// messages across brokers take the same path.
// Before login a peer is bounded on its own (admission.go). With a relay
// directory the broker is also the relay of durable delivery (relay.go),
// and it keeps replicated state (statesvc.go; its store is package
// statestore, state_store.go the glue).
//
// docs/ARCHITECTURE.md draws the packages, the goroutines and the path of
// one message; docs/messaging.md specifies the protocol and the contract.
package broker
