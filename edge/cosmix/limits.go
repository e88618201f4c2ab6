package cosmix

import (
	"time"

	"busbar/wire"
)

// The limits of a cosmix connection (docs/cosmix.md#limits). Each is the
// default of a Config field, or fixed where cosmix-noded fixes it.
const (
	// MaxMessageBytes bounds one WebSocket message, one cosmix frame: seed
	// 004's MAX_MESSAGE_BYTES, noded's WS_MAX_MESSAGE_BYTES (16 MiB). A
	// message one byte longer closes the connection with status 1009
	// (message too big), as noded's tungstenite does.
	MaxMessageBytes = wire.MaxMessageBytes

	// MaxHeaders is the most header lines a frame is read with (seed 004's
	// MAX_HEADERS); lines past it are dropped, as cosmix's parse drops
	// them.
	MaxHeaders = wire.MaxHeaders

	// OutboundQueue is how many frames wait for a connection's writer:
	// noded's PEER_OUTBOUND_BUFFER. A call into a cosmix app whose queue is
	// full is answered rc 20 "overloaded"; a reply or event that does not
	// fit is dropped and counted, as noded drops it.
	OutboundQueue = 256

	// DefaultMaxConns is Config.MaxConns: cosmix connections served at
	// once, logging-in ones included. One more is answered 503.
	DefaultMaxConns = 256

	// DefaultMaxCalls is Config.MaxCalls: requests one connection may have
	// waiting at once, in each direction (calls it made that await their
	// reply; calls into it that await its answer). One more is answered
	// rc 20 at once.
	DefaultMaxCalls = 1024

	// DefaultCallTimeout is Config.CallTimeout: how long a call waits for
	// its answer before the caller gets rc 20 "timed out". It is below the
	// cosmix client's own 60 s, so a cosmix caller hears the reason.
	DefaultCallTimeout = 30 * time.Second

	// DefaultLoginTimeout is Config.LoginTimeout: how long logging a
	// connection in to the broker may take.
	DefaultLoginTimeout = 10 * time.Second

	// DefaultFirstFrameTimeout is Config.FirstFrameTimeout: how long an
	// upgraded connection has to send its first message, whole (any
	// frame; the heartbeat "---\n---\n" will do). One that sends none is
	// closed and counted (RefusedNoFirstFrame). cosmix-lib-client's
	// connect and connect_unix send theirs (register, ping) at once.
	DefaultFirstFrameTimeout = 10 * time.Second

	// DefaultWriteTimeout is Config.WriteTimeout: how long one frame may
	// take to be written to a cosmix peer that does not read; past it the
	// connection is closed.
	DefaultWriteTimeout = 10 * time.Second
)
