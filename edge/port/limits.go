package port

import (
	"time"

	"busbar/wire"
)

// The defaults of Config's limits (docs/ports.md#limits).
const (
	// DefaultMaxRequestBytes bounds one request frame, as cosmix's native
	// reads bound theirs (MAX_MESSAGE_BYTES, 16 MiB).
	DefaultMaxRequestBytes = wire.MaxMessageBytes
	// DefaultReadTimeout is how long a caller has, from connecting, to
	// send its whole request and shut down its write side (cosmix's 10 s).
	DefaultReadTimeout = 10 * time.Second
	// DefaultHandlerTimeout bounds one command's run: its context ends
	// then, and the reply is rc 20.
	DefaultHandlerTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing the reply to a caller that does
	// not read it.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultMaxConns is how many connections a port serves at once; one
	// more is answered at once with an rc 20 "busy" reply and closed.
	DefaultMaxConns = 64
	// DefaultMaxRequestMemory bounds the bytes that the requests being
	// read hold at once, all connections together. A request's buffer
	// grows as it arrives, and each growth takes its bytes from this
	// budget first; one that cannot is answered rc 20 "busy". With the
	// garbage of the growth and the collector's slack, a port process
	// stays well under MaxConns × MaxRequestBytes (1 GiB).
	DefaultMaxRequestMemory = 256 << 20
)

// firstRead is a request buffer's first size; it doubles from there.
const firstRead = 64 << 10

// MaxReplyBytes bounds the reply CallPort reads.
const MaxReplyBytes = wire.MaxMessageBytes

// MaxNameLen is the longest port name, in bytes.
const MaxNameLen = 64

// maxSocketPath is the longest path a Unix socket can be bound to or
// reached at on Linux (sun_path is 108 bytes, NUL included).
const maxSocketPath = 107
