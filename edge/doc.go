// Package edge is busbar's shared door: what every listener of the
// broker, its own and each foreign protocol's, stands behind. The
// adapters below it (edge/moonbridge, edge/trueseal, edge/cosmix,
// edge/port) parse and translate a foreign protocol and nothing else.
//
// What the edge gives every door:
//
//   - Accept: one accept loop. A temporary failure (too many open files,
//     ENFILE, ECONNABORTED, and their like) is logged at most once per
//     AcceptLogInterval per listener and retried after a pause that
//     grows from AcceptPauseMin to AcceptPauseMax; it never stops the
//     door, so a flood that exhausts the process's file descriptors ends
//     with the broker still serving.
//     Listener wraps a listener the same way for code that takes one
//     (net/http's Server); Listeners keeps the listeners a door serves,
//     for its Close.
//   - Admission: the broker's login pool (broker.HoldLoginPlace), shared
//     by every door: a connection that has not proved who it is holds a
//     place from accept until it logs in (the bus's hello, MoonBridge's
//     REGISTER, trueseal's handshake, an HTTP request with the token, a
//     cosmix upgrade), with the pool's per-address share, its grace and
//     its eviction order.
//   - RefusalLog: one rate-limited log for refusals at every door
//     (registration refused, over capacity, malformed frame, handshake
//     failed): at most RefusalBurst lines per RefusalInterval per reason,
//     and one per source address within that, each saying how many were
//     not written since.
//   - Writer: one writer per connection, a bounded queue of frames and
//     one goroutine that drains it, flushes once, then blocks. A frame
//     whose deadline passed while it waited is dropped, never written,
//     and one that carries a remaining time is stamped with the time
//     left as it is written (seed 003 §6).
//   - HTTPServer: the hardened settings every HTTP-based door uses
//     (header size, header, read and idle timeouts).
//   - Counters by door and reason (AcceptFailures, CountClosed,
//     CountExpired), which the broker's metrics read.
//   - FileLimit: the process's descriptor limit, for serve to check its
//     doors' limits against at start.
//
// What an adapter provides: a function that serves one accepted
// connection (it owns the connection from then on), its protocol's
// deadlines for the phase before login, the point where the peer has
// proved who it is (where it releases its admission place), and its
// frames. A new protocol is one package of translation and its tests.
package edge
