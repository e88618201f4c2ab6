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

// DoorName names a port's listener in the edge's accept log and
// edge.AcceptFailures.
const DoorName = "port"

// The reasons a port refuses a request, as its refusal log names them
// (Config.Door.Refusals: a few lines a second per reason, the rest
// counted). Each is answered rc 20 saying why.
const (
	// RefusedBusy: MaxConns connections (and bus calls) served already.
	RefusedBusy = "busy"
	// RefusedMemory: the requests being read hold MaxRequestMemory.
	RefusedMemory = "busy_memory"
	// RefusedTooLarge: a request over MaxRequestBytes.
	RefusedTooLarge = "too_large"
	// RefusedTimeout: a request not complete within ReadTimeout.
	RefusedTimeout = "read_timeout"
	// RefusedMalformed: a request that cannot be run: empty, not a frame,
	// no command, arguments that are not JSON (a bus request's payload
	// that is not a BusRequest).
	RefusedMalformed = "malformed_request"
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
