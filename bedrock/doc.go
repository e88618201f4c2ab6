// Package bedrock is the bedrock-core bus in Go, byte-compatible with its
// JavaScript implementation, so Go programs can join a world of add-ons that
// share one size-capped, rate-limited broadcast channel (and, through
// busbar's bridge, a busbar broker). docs/bedrock.md#the-protocol specifies
// what travels on the channel.
//
// The layers, bottom up:
//
//   - JSON as JavaScript writes it (jsjson.go): strings are sequences of
//     UTF-16 code units; JSON.stringify's escaping (lone surrogates as
//     \udxxx, no HTML escaping); lengths counted in code units.
//   - Frames {c, s, t, p} and chunking (frame.go): an encoded envelope
//     longer than the per-frame budget is cut into code-unit slices, which
//     may split a surrogate pair; the reassembler (reassembly.go) puts
//     groups back together and expires incomplete ones.
//   - The envelope {v, src, iid, dst?, type, mid, data?} (envelope.go),
//     decoded strictly.
//   - The Bus (bus.go): the JavaScript Bus class — outbound queue flushed
//     every tick, the seven-step receive path, loopback — over a Medium
//     (medium.go: an in-memory World for tests, a line medium for stdio),
//     in ticks from an injectable Clock (clock.go).
//   - Discovery, RPC and replicated state on top (discovery.go, rpc.go,
//     state.go), the last with the JavaScript bus's rule (any add-on
//     writes any namespace, last-write-wins; docs/bedrock.md#state) on
//     package state's entries, versions and limits.
package bedrock
