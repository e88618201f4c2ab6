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
// Routing resolves a target to a connection through the directory. The
// directory is the single place a durable relay or a NATS-joined peer
// broker slots in later: a target that is not a local connection is
// NOT_CONNECTED today.
//
// docs/messaging.md specifies the protocol and the contract.
package broker
