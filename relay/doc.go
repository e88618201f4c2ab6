// Package relay is the durable inbox store of busbar's relay: the part of
// trueseal delivery (DESIGN.md, seed 001) that holds sealed blobs for
// devices that are not connected. The relay never opens a blob; per blob
// it knows the recipient device id, the size and the times.
//
// The contract, as the store keeps it:
//
//   - Push returns only after the fsync that covers the blob. Concurrent
//     pushes share fsyncs (group commit): one writer goroutine takes every
//     pending push, appends them to the log in one write, syncs once, then
//     completes them all. PushAsync admits a push and returns at once; its
//     callback runs on the writer after that fsync, in admission order, so
//     one caller can keep many pushes outstanding, in order.
//   - A Session yields one device's inbox in arrival order, each blob once;
//     a new Session starts again from the oldest blob not acked.
//   - Ack deletes a blob from the acking device's inbox only; another
//     device's sequence number is ErrNoSuchBlob (AckRange, for a run of
//     sequences, passes over it). The deletion is durable with the next
//     group commit; Ack does not wait for it, so a crash
//     right after an Ack can only bring that blob back for one more
//     delivery.
//   - A refused push is a *Refusal with a Code and no content: TooLarge and
//     Malformed are permanent; InboxFull, RateLimited, Unavailable and
//     Internal temporary. Every bound is a named constant with an Options
//     field (docs/relay-store.md#limits).
//   - busbar's own inboxes and the edge protocols' (EdgeDevice: trueseal's)
//     are bounded by two budgets, counted apart (budget.go): no amount of
//     pushes to the edge's inboxes, anonymous ones included, refuses a
//     push to one of busbar's own.
//   - A blob not acked within the TTL (30 days by default, at most 30
//     days: a longer Options.TTL refuses to open) is deleted and never
//     delivered; nobody is told.
//
// On disk the store is a directory of append-only segment files
// (record.go has the bytes). Every record carries a CRC-32C; Open replays
// the segments into the in-memory index, cuts a torn tail from the newest
// one (what a crash leaves of a write never acknowledged) and refuses,
// with ErrDamaged, damage a crash cannot explain. Space is given back by
// deleting the oldest segment once nothing in it is live, after copying
// its live records forward when the log holds more dead bytes than live
// ones.
//
// Goroutines: the writer (owns the files: writes, syncs, rotates and
// deletes segments) and the sweeper (expiry, forgetting idle inboxes),
// both started by Open and joined by Close. Callers' goroutines admit
// pushes, read blobs and apply acks under Store.mu; no file is written
// outside the writer.
//
// docs/relay-store.md has the design, the on-disk format, the limits, the
// crash guarantees and the figures.
package relay
