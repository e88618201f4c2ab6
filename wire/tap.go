package wire

import "time"

// Tap commands (docs/operations.md#busbar-tap): a node whose principal
// holds the tap permission asks the broker for a copy of the traffic it
// routes. bus.tap and bus.untap are requests to the broker; bus.tap.event
// is the event the tapping node receives, one per message.
const (
	CmdTap      = "bus.tap"       // request: start (or change) this connection's tap (body: TapRequest)
	CmdUntap    = "bus.untap"     // request: stop it
	CmdTapEvent = "bus.tap.event" // event, broker → tapper: a TapEvent
)

// Limits of a tap.
const (
	// MaxTapPatterns bounds the channel patterns and the nodes of one
	// TapRequest, each.
	MaxTapPatterns = 64
	// TapPreviewBytes is the most of a body a TapEvent carries.
	TapPreviewBytes = 256
)

// TapRequest is the body of bus.tap. Empty lists match everything the
// tapper may see; Channels are permission patterns (docs/messaging.md),
// Nodes are node names, matched against the sender and the target.
type TapRequest struct {
	Channels []string `json:"channels,omitempty"`
	Nodes    []string `json:"nodes,omitempty"`
}

// TapEvent is one message the broker routed, as a tapper sees it.
type TapEvent struct {
	Time    time.Time         `json:"time"`
	Kind    string            `json:"kind"` // stream, send, publish, request, response
	ID      string            `json:"id,omitempty"`
	From    string            `json:"from"`
	To      string            `json:"to,omitempty"`
	Channel string            `json:"channel"`
	Size    int               `json:"size"`              // the body's bytes
	Headers map[string]string `json:"headers,omitempty"` // every header but the ones above and type
	// Preview is the body's first TapPreviewBytes bytes; Truncated says
	// there were more.
	Preview   []byte `json:"preview,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	// Missed counts the events this tap lost just before this one
	// because the tapper's queue was full.
	Missed uint64 `json:"missed,omitempty"`
}
