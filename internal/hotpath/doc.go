// Package hotpath is the allocation-free frame handling that the broker,
// the client and internal/sendq share on their hot path (see
// docs/performance.md#the-hot-path): a stream frame parsed in place
// (View, ParseView), forwarded with a new from and a fixed-width ttl
// spliced in (AppendForward), a stream message encoded without building a
// wire.Message (AppendEvent), and the remaining ttl stamped into a frame's
// copy at write time (PatchTTL); and Instant, the pointer-free deadline
// that queues and received messages keep.
//
// It exists so that these stay out of package wire's public API. They
// trade the Message API's checks and ownership for speed: a View's strings
// alias a read buffer that the next read overwrites, AppendEvent trusts its
// caller's header values, and PatchTTL writes digits at an offset it takes
// on faith. That is the right trade inside busbar and the wrong thing to
// offer a program that merely speaks the protocol, which has wire's
// Reader, Writer and Message for that.
//
// Everything here reads and writes the frames docs/protocol.md specifies,
// and wire.Decode is the reference: ParseView accepts exactly the frames
// Decode accepts, with Decode's error otherwise, and what AppendForward
// writes decodes to the same message but for from and ttl (FuzzView checks
// both).
package hotpath
