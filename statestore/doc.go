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
//     owner rule, the key count). A store that fails a check is refused
//     with an error matching ErrUntrusted and left as it was: a panic or a
//     memory fault in bbolt over a damaged file is such a refusal, not a
//     crash. A file group or others may access is refused too
//     (auth.ErrInsecureFile).
//   - Put, Drop, SetMeta, PutTomb and ForgetTombs are durable (bbolt's
//     fsync) when they return; a namespace's record and its entries change
//     in one transaction.
//   - The rules of the namespaces themselves are package state's; what a
//     bus merges (epochs, owners, tombstones) is the broker's. This package
//     stores and verifies, and imports neither the broker nor the bus.
//
// It is a top-level package beside relay (the relay's store), not a
// subpackage of state: state is the replicated key-value model without
// I/O, which the Go client and the bedrock bus share, and this is the file
// only the broker keeps it in, with bbolt behind it. As state/store it
// would be imported as "store", a name the broker already uses for both
// stores' fields; statestore says which store at every call.
package statestore
