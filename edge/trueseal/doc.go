// Package trueseal is a trueseal relay at busbar's edge: trueseal's own
// clients (trueseal-sync and its bindings) push to and receive from
// busbar's relay store (package relay) over trueseal's relay protocol,
// as specified by the public trueseal-relay repository (ADR-0002, 0006,
// 0008, 0009). Nothing here is in busbar's routing core; the store, its
// group commit and its limits are shared with busbar's own relay role.
//
// The protocol, on one TCP listener:
//
//	stream     := noise-msg*            noise-msg := [len: u16 BE][len bytes]
//	push       := Noise_NK_25519_ChaChaPoly_BLAKE2s (client knows the relay's static key; sender anonymous)
//	receive    := Noise_XX_25519_ChaChaPoly_BLAKE2s (device's static key = its inbox address)
//	frame      := [type: u8][len: u32 BE][body]     one frame per transport message
//
//	0x01 Push       client → relay   [recipient key: 32][envelope]
//	0x02 Deliver    relay → device   [blob id: u64 BE][envelope]
//	0x03 Heartbeat  both ways        empty
//	0x04 Ack        relay → client   empty: the push is on disk (after its fsync)
//	0x05 Error      relay → client   empty: the push is refused for good; the session goes on
//	0x06 DeliverAck device → relay   [blob id: u64 BE]: delete it from my inbox
//
// trueseal-relay listens for push and receive sessions on two ports; here
// one listener takes both: the first handshake message tells them apart
// (NK's is 48 bytes only the relay's static key opens; XX's is an
// ephemeral key in clear). An envelope is never parsed: the relay routes
// by the 32-byte recipient key in front of it.
//
// Where the inboxes live is the Inboxes the server is given: its own
// relay store, or the broker's (BusInboxes), which on a bus with relay
// brokers keeps each inbox on its home broker and forwards pushes,
// sessions and DeliverAcks there, so any broker with a trueseal listener
// reaches any trueseal inbox. There every broker must hold the same relay
// key (clients pin it): JoinBus announces its fingerprint to the bus and
// refuses, naming both, when another broker holds another.
//
// The server stands behind busbar's shared door (Options.Door, package
// edge): its accept loop is edge.Accept; a connection holds a place in
// the shared pre-login admission (Door.Hold) from accept until its
// handshake is done, and only then a session place (MaxSessions), which
// a session that pushes and receives nothing gives up first, and after
// FirstFrameTimeout; every refusal a peer can cause is written through
// Door.Refusals. Anonymous pushers are bounded by a token bucket per
// source address (SourcePushRate) and, in the store, by the edge
// protocols' budget (relay.Options.Edge), apart from busbar's own
// inboxes; receive sessions, whose keys cost nothing to make, by a share
// per source address (MaxReceivePerSource).
//
// docs/trueseal.md has the configuration, the limits, what an anonymous
// pusher can make the relay hold, the bus and what differs from
// trueseal-relay.
package trueseal
