// Package moonbridge lets MoonBridge's Java 8 backend client
// (backend-channel-client, used by its Bukkit plugin) connect to busbar
// unchanged: it speaks the binary protocol MoonBridge's proxy speaks to
// its backends, and makes each backend connection an ordinary busbar node
// over an in-process connection, translated both ways. Routing,
// permissions, receipts and limits stay busbar's own.
//
// # The protocol (version 3)
//
// Every frame is a 4-byte big-endian length N (1..MaxFrameBytes) and N
// bytes whose first byte is the frame type. Integers are big-endian;
// a string is a u16 length and that many UTF-8 bytes; a UUID is two i64
// (most, least significant); a boolean is one byte, 0 or 1.
//
//	HELLO      1  proxy → backend: i32 version, 32-byte nonce
//	REGISTER   2  backend → proxy: instance id, backend name, game
//	              address, generation, key id (strings), 32-byte
//	              HMAC-SHA256(secret, nonce ‖ the five strings as encoded)
//	REGISTERED 3  proxy → backend: i64 backend epoch, UUID proxy epoch
//	HEARTBEAT  4  backend → proxy, empty; answered by
//	PONG       5  proxy → backend, empty
//	GOODBYE    6  either way, empty: the sender is leaving
//	MESSAGE    9  either way: i64 operation id (> 0), i64 timeout in ms
//	              (1..60000), a message (never a reply)
//	RESPONSE  10  either way: i64 operation id, u8 type, then
//	              1 send result: u8 result
//	              2 reply: a message of kind reply
//	              3 publish: UUID message id, u16 count (≤ 256), count ×
//	                (endpoint, u8 result)
//	              4 error: u8 code, string detail (0..1024 bytes)
//
// A message is: UUID id, u8 kind (1 event, 2 request, 3 reply), string
// channel (namespace:path, ≤ 128 bytes), endpoint source, boolean + endpoint
// target, boolean + UUID reply-to, i32 payload length (≤ 64 KiB), payload.
// An endpoint is a boolean "is the proxy" and, when false, a string
// backend name (1..128 bytes).
//
// docs/moonbridge.md shows an operator how to point a backend at busbar
// and what differs from MoonBridge's own proxy.
package moonbridge
