// Package statestore is the broker's state store (Options.StatePath): one
// bbolt file holding every namespace of the state service, its record
// (owner, sequence number, incarnation) and, on a bus, the tombstones of
// dropped namespaces.
//
// The contract, as the store keeps it (docs/state.md#the-store):
//
//   - Open loads a store only when it can be trusted: the file's structure
//     is checked before bbolt maps it, bbolt's own check runs, and every
//     record is verified (a CRC-32C each, the namespace and key rules, the
//     owner rule, the key count). Anything else is an error matching
//     ErrUntrusted, and the file is left as it was: a panic or a memory
//     fault in bbolt over a damaged file is such an error, not a crash.
//   - Put, Drop, SetMeta, PutTomb and ForgetTombs are durable (bbolt's
//     fsync) when they return; a namespace's record and its entries change
//     in one transaction.
//   - The rules of the namespaces themselves are package state's; what a
//     bus merges (epochs, owners, tombstones) is the broker's. This package
//     stores and verifies, and imports neither the broker nor the bus.
//
// It is its own package beside relay, the relay's store, and not a part of
// package state: state is the replicated key-value model without I/O,
// which the Go client and the bedrock bus share, and this is the one file
// the broker keeps it in, with bbolt behind it. The name says both.
package statestore
