// Package durable is a device's side of durable end-to-end delivery
// (trueseal, seed 001): the device's store, the sender's outbox and the
// recipient's pipeline, over a small interface to the relay (Relay).
//
// # The device
//
// A device is a directory (Init, Open): its identity (seal's key file,
// device.key), one file per group (groups/NAME, the current signed
// manifest, replaced by a temporary file, fsync and rename) and device.db,
// a bbolt database holding the outbox, the dedup table, the blobs held for
// an upgrade, the manifests kept until their signer is known, invitation
// records and the buffered delivery events (records.go has the bytes).
//
// Several processes use one device at once: a listener keeps running
// while a send runs in another shell. So no Device keeps device.db open:
// each operation opens it, runs one transaction under bbolt's exclusive
// file lock, waiting at most Options.LockTimeout for another holder
// (ErrLocked), and closes it. Group files are written only inside such a
// transaction, so the lock orders them too. The price is an open and a
// close per operation (a few hundred microseconds and the commit's
// fsyncs), which a device's message rate affords.
//
// # Sending
//
// Send checks the body, then writes the message once and one outbox entry
// per recipient (every other member of the group) in one transaction,
// fsync'd before it returns; it needs no relay. Flush pushes what is due:
// per recipient in send order, an entry sealed anew at each push (same
// message id and sender timestamp), deleted when the relay's push ack
// comes, retried with backoff (1 s doubling to 5 min, at once after
// RetryNow; a success resets the backoff behind it) on a temporary
// failure, removed with sendFailed on a permanent refusal or, for a Sync
// message, 30 days after Send.
//
// # The device's process
//
// Serve (serve.go) is the device's long-running instance: it pushes the
// outbox whenever something may be due — including when another process
// of the device queued an entry (it watches SignalFile, watch.go) and,
// over a LiveRelay, every entry at once when the connection comes back —
// receives across reconnects, gives the delivery events to a listener,
// and returns ErrTakenOver when a newer receive session of the device
// takes over, or *RelayVersionUnsupported.
//
// # Receiving
//
// OnMessage registers the one handler; Run then opens a receive session
// and takes each blob through the seed's steps, one at a time: the
// version check (a newer one held unacked, at most MaxHeld), seal.Open
// against the held manifests, the replay window, the dedup table, the
// handler (awaited, 5 attempts), the dedup record, then the ack. Control
// messages (GroupManifest, Leave, Revoke) are applied by the library with
// seal.ApplyControl and skip the dedup table. One that cannot be judged
// yet — its signer is not known, or it was made on an epoch not received
// — is kept (at most MaxPendingManifests) and applied again after each
// manifest the device holds for its group, so manifests from different
// devices may arrive in any order.
//
// # Pairing
//
// Invite records a token (deleted TokenRetention after its expiry); Join
// queues a Pair to the inviter and records the join. The inviter's Run accepts one Pair per token (Token.VerifyPair)
// and sends the next manifest to every member; the joiner's Run installs
// it (seal.ApplyInvited). Leave and Revoke send the next manifest too.
//
// # Events
//
// Delivery events (sendFailed, heldForUpgrade, unreadable, deliveryIssue,
// handlerGaveUp) are written to device.db in the transaction that decides
// them, so they wait for a listener in any process. Reading them (Events)
// does not consume them (AckEvents does); Serve gives each to its OnEvent
// once. At most Options.MaxEvents are kept: past that the oldest is
// deleted, and counted when no listener was shown it.
//
// docs/durable.md ("The outbox", "The recipient") has the details.
package durable
