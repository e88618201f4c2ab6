// Package transport turns a broker address into a plain net.Conn. Every way a
// process reaches a busbar broker — unix socket, TCP, TLS, WebSocket, or an
// in-process pair — ends in a net.Conn that the broker serves with one
// accept path, so nothing above this package knows or cares how the bytes
// travel.
//
// # Endpoints
//
// ParseEndpoint accepts these forms:
//
//	unix:///run/busbar/broker.sock   unix socket (absolute path)
//	/run/busbar/broker.sock          same, bare absolute path
//	tcp://broker.example:4222        plain TCP
//	broker.example:4222              same, bare host:port
//	tcp://:4222                      empty host (see below)
//	tls://broker.example:4222        TLS over TCP
//	tls://[::1]:4222                 IPv6 literals go in brackets
//	ws://127.0.0.1:7475              WebSocket at WebSocketPath (/bus), which may be written out
//	wss://broker.example:443/bus     WebSocket over TLS
//
// Scheme names are case-insensitive; Endpoint.String gives the canonical
// lower-case URL, which ParseEndpoint maps back to the same Endpoint. Unix
// paths are taken literally (no percent-decoding) and may be at most
// MaxUnixPathLen bytes. Queries, fragments, userinfo and URL paths after a
// host:port are refused rather than ignored, so a typo cannot silently change
// the meaning of an address. Every refusal wraps ErrBadEndpoint.
//
// Port 0 is accepted: Listen then picks an ephemeral port (read it back from
// the listener's Addr), which is what tests want. Dialing port 0 fails.
//
// A tcp endpoint with an empty host ("tcp://:4222") means all interfaces to
// Listen and localhost to Dial, mirroring net.Listen. tls endpoints need a
// host, because the client verifies the server's certificate against it.
//
// # Security defaults
//
// Unix sockets are created with mode 0600, so only the broker's own user can
// connect. On Linux the mode is applied to the socket before bind, so the file
// never exists with wider permissions; elsewhere it is chmodded immediately
// after bind, and the parent directory is expected to be 0700 (the broker's
// data directory is) so that nobody else can reach the socket in between.
// Listen replaces a stale socket left by a crash (one nobody answers on), but
// refuses a live one with ErrAddressInUse and never removes a file that is not
// a socket. Closing the listener removes the socket file.
//
// Both ends of a unix socket connection, dialled or accepted, ask for a
// send buffer of UnixSendBuffer (the kernel caps it at net.core.wmem_max):
// the kernel's default is a fraction of what loopback TCP's buffers grow
// to, and a writer at full speed would sleep and wake far more often.
//
// TLS listeners require a certificate and default to TLS 1.2 as the minimum
// version. TLS dials verify the server's certificate: with a nil config
// against the system roots and the endpoint's host name.
//
// Plain tcp carries no confidentiality or server authentication; use it only
// on loopback or a trusted network.
//
// # WebSocket
//
// A WebSocket carries one busbar frame per binary message, without the
// stream's length prefix (docs/protocol.md#websocket). Both ends present
// it as the length-prefixed stream the other transports carry: Read adds
// the prefix, Write strips it and sends each complete frame as a message,
// so the broker and the client read and write it like any stream. A broker
// takes WebSocket connections through an HTTP server: mount a
// WebSocketListener at WebSocketPath and give it to Broker.Serve like any
// listener; it checks the browser's origin first (see WebSocketListener).
// Dial reaches it with a ws:// or wss:// endpoint. Listen refuses those:
// the HTTP server is the listener.
//
// A connection that carries one frame per message must read a message
// whole before the stream reader above it sees the length, so it
// implements FrameLimiter; the broker passes on its frame limits.
package transport
