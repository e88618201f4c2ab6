package wire

import "time"

// Control traffic: the handshake, registrations, receipts and publish
// results are ordinary messages on commands under the reserved "bus."
// namespace (as D-Bus has org.freedesktop.DBus and NATS has $SYS).
// docs/messaging.md specifies each exchange.
const (
	CmdInfo      = "bus.info"      // broker → client, first frame: version, broker name, nonce
	CmdHello     = "bus.hello"     // client → broker request: node name and credential
	CmdSubscribe = "bus.sub"       // register interest in events on a channel (HeaderQueue: as a member of a queue)
	CmdUnsub     = "bus.unsub"     // withdraw it
	CmdHandle    = "bus.handle"    // register the node's request handler for a channel
	CmdUnhandle  = "bus.unhandle"  // withdraw it
	CmdReceipt   = "bus.receipt"   // delivery receipt for an event sent to one node
	CmdPublished = "bus.published" // per-node results of a publication
	CmdError     = "bus.error"     // broker → client before it closes: why
	CmdGoodbye   = "bus.goodbye"   // broker → client: shutting down, drain and reconnect later
	CmdDirectory = "bus.directory" // request: the broker's directory of nodes
)

// ControlPrefix starts every control command; applications cannot use it.
const ControlPrefix = "bus."

// HeaderResult carries a machine-readable outcome: a receipt result on
// bus.receipt, or a request error kind on a failed response. It is busbar's
// one header beyond the core set.
const HeaderResult = "result"

// Result is a delivery outcome (docs/messaging.md#results). Receipts use the
// first seven; request failures use the Result… kinds.
type Result string

// Receipt results.
const (
	Accepted      Result = "ACCEPTED"      // the destination node queued it for its handlers
	NoSubscriber  Result = "NO_SUBSCRIBER" // the node is connected but nobody there listens
	NotConnected  Result = "NOT_CONNECTED" // no such node is connected
	Backpressured Result = "BACKPRESSURED" // a bounded queue on the way was full
	Rejected      Result = "REJECTED"      // refused: permissions, limits, bad input
	TimedOut      Result = "TIMED_OUT"     // the deadline passed first; it may still have run
	Failed        Result = "FAILED"        // unknown: e.g. the node left before answering
)

// Request error kinds, carried in HeaderResult of a failed response.
const (
	ResultNoHandler  Result = "NO_HANDLER"
	ResultOverload   Result = "OVERLOAD"
	ResultTimeout    Result = "TIMEOUT"
	ResultDisconnect Result = "DISCONNECT"
	ResultRejected   Result = "REJECTED"
	ResultHandler    Result = "HANDLER_FAILED"
	ResultVersion    Result = "VERSION"       // handshake: incompatible protocol version
	ResultAuth       Result = "AUTH"          // handshake: bad credentials or node not allowed
	ResultMalformed  Result = "MALFORMED"     // a frame the broker could not accept
	ResultTooLarge   Result = "TOO_LARGE"     // a frame over the limit
	ResultShutdown   Result = "SHUTDOWN"      // the broker is stopping
	ResultReplaced   Result = "REPLACED"      // a newer connection took this node name
	ResultLease      Result = "LEASE"         // no frame within the lease: presumed dead
	ResultSlow       Result = "SLOW_CONSUMER" // outbound queue stayed over its limit
	// Kinds only a node an edge adapter logs in may claim, for the peer
	// behind it whose protocol has them (a MoonBridge backend,
	// docs/moonbridge.md): what the peer needed was not connected, and
	// the peer broke its protocol answering. A node of an edge may claim
	// TIMEOUT and REJECTED as well.
	ResultNotConnected Result = "NOT_CONNECTED"
	ResultProtocol     Result = "PROTOCOL_ERROR"
)

// Info is the body of bus.info, the broker's first frame.
type Info struct {
	Broker   string `json:"broker"`   // the broker's node name
	Protocol string `json:"protocol"` // ProtocolVersion of the broker
	// Min and Max are the protocol versions the broker accepts
	// (ProtocolMin, ProtocolMax); absent from brokers that predate them,
	// which accept Protocol alone.
	Min   int    `json:"min,omitempty"`
	Max   int    `json:"max,omitempty"`
	Nonce []byte `json:"nonce"` // fresh per connection; public-key clients sign it
}

// Hello is the body of the bus.hello request.
type Hello struct {
	Node      string `json:"node"`
	Principal string `json:"principal,omitempty"`
	Secret    string `json:"secret,omitempty"`
	Signature []byte `json:"signature,omitempty"`
	IID       string `json:"iid,omitempty"` // this client instance's id; the broker makes one up when absent
	// Advertise is an address the node offers for its own service (a
	// MoonBridge backend's game address), shown in the directory: at most
	// MaxAdvertiseLen bytes of printable ASCII.
	Advertise string `json:"advertise,omitempty"`
}

// MaxAdvertiseLen bounds Hello.Advertise (MoonBridge's game address).
const MaxAdvertiseLen = 1024

// Welcome is the body of a successful bus.hello response.
type Welcome struct {
	Node        string `json:"node"`
	Epoch       uint64 `json:"epoch"` // increments each time the node name reconnects
	IID         string `json:"iid"`   // the instance id, unique among live connections
	Broker      string `json:"broker"`
	HeartbeatMS int64  `json:"heartbeat_ms"` // send a heartbeat after this much silence
	LeaseMS     int64  `json:"lease_ms"`     // silence after which the broker drops the node
	MaxPayload  int    `json:"max_payload"`
	MaxInflight int    `json:"max_inflight"`
}

// HeaderQueue on bus.sub names the queue the subscription belongs to:
// each event or stream message on the channel goes to one member of each
// queue, and to every subscriber outside a queue
// (docs/messaging.md#queue-subscriptions). A label.
const HeaderQueue = "queue"

// HeaderQueueChosen is a header between the brokers of a bus, on the
// publications and stream messages one forwards to another that has
// queue members: the members of that broker the publisher's broker chose,
// node names joined by commas (empty: none of them). The receiving broker
// gives the message to those of its queue members only, and takes the
// header off before its nodes see it; a node may not send it
// (docs/messaging.md#queue-subscriptions).
const HeaderQueueChosen = "queue-chosen"

// NodeInfo describes one registered node in the broker's directory (the
// body of a bus.directory answer is a JSON array of them).
type NodeInfo struct {
	Node          string    `json:"node"`
	Broker        string    `json:"broker,omitempty"` // the broker it is connected to (docs/cluster.md)
	Epoch         uint64    `json:"epoch"`
	IID           string    `json:"iid"`
	Remote        string    `json:"remote"`
	LastSeen      time.Time `json:"last_seen"`
	LeaseExpires  time.Time `json:"lease_expires"`
	Subscriptions []string  `json:"subscriptions"`
	Handlers      []string  `json:"handlers"`
	// Queues are the subscriptions made as members of a queue: the
	// subscription (a channel or pattern of Subscriptions) → the queue.
	Queues     map[string]string `json:"queues,omitempty"`
	Advertised string            `json:"advertised,omitempty"` // the node's Hello.Advertise
}

// NodeResult is one candidate's outcome in a bus.published body.
type NodeResult struct {
	Node   string `json:"node"`
	Result Result `json:"result"`
}
