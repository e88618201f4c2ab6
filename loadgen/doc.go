// Package loadgen generates load on a busbar broker and measures it: the
// engine behind `busbar bench` and the side-by-side comparison with NATS
// (bench/ in the repository). Every run is bounded by a message count, a
// duration and its context, and stops by itself.
//
// Throughput is measured from the first to the last message; latency is
// measured per operation (a request's round trip; for published messages,
// from the send time the publisher writes into the first 8 bytes of each
// payload to its arrival), never derived from the rate.
package loadgen
