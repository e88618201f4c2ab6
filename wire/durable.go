package wire

// The relay's commands on a broker connection: durable, end-to-end-sealed
// delivery (docs/durable.md#the-relay-on-the-broker-connection). The
// bodies are opaque sealed blobs; the relay reads only the recipient in a
// blob's clear header.
const (
	// CmdDurablePush is a request whose body is one sealed blob. The
	// answer (rc 0) carries, as its body, the blob's sequence in the
	// recipient's inbox, and comes only once the blob is on disk.
	CmdDurablePush = "bus.durable.push"
	// CmdDurableReceive is a request that starts a receive session for
	// one device on this connection; its body is a DurableReceive.
	CmdDurableReceive = "bus.durable.receive"
	// CmdDurableDeliver is an event from the broker: one blob of the
	// session's inbox, its sequence in the id header, the blob as body.
	CmdDurableDeliver = "bus.durable.deliver"
	// CmdDurableAck is a request whose body is the decimal sequence of a
	// delivered blob: the relay deletes it from the session's inbox.
	CmdDurableAck = "bus.durable.ack"
	// CmdDurableInbox is a request with a DurableReceive body (the same
	// proof of the device's key): the answer is the device's inbox at the
	// relay, a DurableInbox.
	CmdDurableInbox = "bus.durable.inbox"
)

// DurableWindow bounds the blobs a receive session has delivered and not
// yet seen acked: the relay sends the next only once an earlier one is
// acked, so a receiver needs room for this many (and a device may hold up
// to 100 blobs of a newer version unacked and still receive).
const DurableWindow = 256

// The relay's refusals of a push, which carry no content. TOO_LARGE and
// MALFORMED (ResultTooLarge, ResultMalformed) are permanent; these are
// temporary: the sender keeps the entry and retries.
const (
	ResultInboxFull   Result = "INBOX_FULL"
	ResultRateLimited Result = "RATE_LIMITED"
	ResultUnavailable Result = "UNAVAILABLE"
	ResultInternal    Result = "INTERNAL"
)

// DurableReceive is the body of bus.durable.receive: the device, its
// public key (seal.Public.Bytes(), from which the device id is derived),
// and its proof (seal.Identity.ProveReceive) that the connection holds
// the device's key.
type DurableReceive struct {
	Device string `json:"device"`
	Public []byte `json:"public"`
	Sig    []byte `json:"sig"`
}

// DurableInbox is the answer to bus.durable.inbox: what the relay holds
// for the device.
type DurableInbox struct {
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
}
