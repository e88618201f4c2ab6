package broker

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"busbar/relay"
	"busbar/wire"
)

// Defaults for Options. Each is a limit users may need to tune; each is
// documented in docs/messaging.md and tested at its edge.
const (
	DefaultName                 = "broker"
	DefaultHandshakeTimeout     = 5 * time.Second
	DefaultHeartbeatInterval    = 5 * time.Second
	DefaultLeaseTimeout         = 15 * time.Second
	DefaultMaxQueueBytes        = 8 << 20 // outbound bytes queued per connection
	DefaultMaxQueueMessages     = 65536   // outbound messages queued per connection
	DefaultWriteTimeout         = 10 * time.Second
	DefaultMaxInflight          = 1024    // pending calls a connection may have open
	DefaultMaxPayload           = 1 << 20 // bytes of body in one message
	DefaultMaxTTL               = 5 * time.Minute
	DefaultDrainTimeout         = 5 * time.Second
	DefaultMaxConnections       = 10000                  // connections served at once, handshaking ones included
	DefaultMaxRegistrations     = 1024                   // subscriptions plus handlers one connection may hold
	DefaultMaxHandshakes        = 512                    // connections logging in at once, per kind (local, network)
	DefaultMaxHandshakesPerAddr = 128                    // network connections logging in at once from one address
	DefaultHandshakeGrace       = 500 * time.Millisecond // a connection logging in cannot be evicted for this long
	DefaultHandshakeIdleGrace   = 50 * time.Millisecond  // …nor, while it has sent nothing of a hello, for this long
	DefaultLocalReserve         = 64                     // of MaxConnections, places only local (Unix socket) peers may take
	DefaultReceiptTimeout       = 2 * time.Second        // a node owing receipts that answers none this long is cut as a slow consumer
	DefaultMaxNodesPerPrincipal = 64                     // live nodes one principal may have at once (one allowed every channel: no cap)
	MaxPublishCandidates        = 256                    // a publication reaching more nodes is refused whole (docs/messaging.md#results)
	streamStall                 = 2 * time.Millisecond   // shortest wait for room before a stream message goes to the reserve
	frozenAfter                 = 50 * time.Millisecond  // a writer without progress this long is taken for frozen by a stalled producer
	stuckAfter                  = 250 * time.Millisecond // a writer without progress this long is not stalled for
	MaxIDLen                    = 64                     // bytes in a message id
	// MaxFrameOverhead is what a frame may carry beyond MaxPayload (its
	// header block): a longer frame closes the connection with TOO_LARGE
	// before it is read, so a peer cannot make the broker buffer more than
	// it could route.
	MaxFrameOverhead = 64 << 10
	sweepInterval    = time.Second
	// refuseWriteTimeout bounds the write of the bus.error that tells a
	// refused connection why.
	refuseWriteTimeout = time.Second
	maxPayloadCeiling  = wire.MaxMessageBytes - MaxFrameOverhead
)

// Options configure a Broker. The zero value of every field means its
// default.
type Options struct {
	// Name is the broker's own node name: the endpoint that embedded code
	// connects as (docs/messaging.md#the-model). Only in-process connections may use it.
	Name string

	// Auth authenticates connections. Required, except that in-process
	// connections are trusted.
	Auth Authenticator

	Logger *slog.Logger

	// HandshakeTimeout bounds the time from accept to a registered node.
	HandshakeTimeout time.Duration
	// HeartbeatInterval is how often each side sends a heartbeat when it has
	// sent nothing else; LeaseTimeout is how long a silent node keeps its
	// lease. A dead peer is removed within LeaseTimeout + 1s.
	HeartbeatInterval, LeaseTimeout time.Duration

	// MaxQueueBytes and MaxQueueMessages bound each connection's outbound
	// queue. A message that does not fit is refused with BACKPRESSURED.
	// Stream messages stall their producer at three quarters of each (the
	// pace mark, sendq.ReserveShare) and fill the last quarter only when
	// a stall ran out (enqueueStream).
	MaxQueueBytes, MaxQueueMessages int
	// WriteTimeout bounds one batch write to a socket. A peer that does not
	// read for this long is disconnected as a slow consumer.
	WriteTimeout time.Duration

	// MaxInflight bounds the sends, requests and publications one connection
	// may have waiting for an answer; past it new ones get OVERLOAD.
	MaxInflight int
	// MaxPayload bounds a message body; past it the message is REJECTED.
	MaxPayload int
	// MaxTTL caps the deadline a message may carry (and applies to one
	// that carries none).
	MaxTTL time.Duration
	// DrainTimeout bounds Shutdown's wait for open requests to finish.
	DrainTimeout time.Duration
	// MaxConnections bounds the connections served at once, handshaking
	// ones included; one more is closed at once and counted. In-process
	// connections are not counted.
	MaxConnections int
	// ReceiptTimeout: a node that owes receipts (events and publications
	// delivered to it, not yet answered) and answers none for this long is
	// a slow consumer, though its heartbeats keep its lease: what it owes
	// is answered TIMED_OUT at once, and it is disconnected, counted
	// (Stats().SlowConsumers) and logged. The client answers a receipt as
	// it reads the event, so only a node that stopped reading owes one
	// this long. 0 is DefaultReceiptTimeout.
	ReceiptTimeout time.Duration
	// MaxNodesPerPrincipal bounds the nodes one principal may have logged
	// in at once, so that no principal can make a channel's publications
	// reach more than MaxPublishCandidates nodes (and be refused whole) by
	// logging in idle nodes. A principal allowed every channel action on
	// ">" (the owner's "local") is not capped: it may reach every node
	// anyway. A hello past it is refused REJECTED; a reconnect of a node
	// already logged in replaces it and is not counted twice. 0 is
	// DefaultMaxNodesPerPrincipal; negative is none.
	MaxNodesPerPrincipal int
	// LocalReserve is how many of MaxConnections only local (Unix socket)
	// peers may take: network peers (TCP, TLS, WebSocket over TCP) are
	// refused at MaxConnections - LocalReserve, so they never take the
	// places the owner's own processes need. 0 is DefaultLocalReserve,
	// at most a quarter of MaxConnections; negative is none.
	LocalReserve int
	// MaxRegistrations bounds the channels one connection subscribes to or
	// handles; past it a registration is REJECTED.
	MaxRegistrations int
	// MaxHandshakes bounds the connections logging in at once, counted
	// apart for local (Unix socket) and network peers; MaxHandshakesPerAddr
	// bounds a network address's share. When full, of the connections
	// past their HandshakeGrace the one whose peer has sent the least of
	// a hello, the oldest of equals, is closed to make room
	// (docs/messaging.md#before-login).
	MaxHandshakes, MaxHandshakesPerAddr int
	// HandshakeGrace is how long a connection logging in keeps its place
	// whatever comes after it: when the place that would make room for a
	// newcomer is younger, the newcomer is refused (OVERLOAD, counted in
	// Stats().HandshakesRefused) instead. A peer that logs in promptly is
	// never evicted by a flood, and evictions are at most MaxHandshakes
	// per HandshakeGrace. 0 is DefaultHandshakeGrace; negative is none.
	HandshakeGrace time.Duration
	// HandshakeIdleGrace is HandshakeGrace for a connection whose peer
	// has sent nothing of a hello for that long (nothing at all, or
	// nothing after a part of one): a client that logs in promptly sends
	// its whole hello within a round trip of bus.info, so a flood of idle
	// or stalled connections makes room ten times sooner, and must open
	// MaxHandshakes connections per HandshakeIdleGrace to refuse
	// newcomers. 0 is DefaultHandshakeIdleGrace (at most HandshakeGrace);
	// negative is HandshakeGrace.
	HandshakeIdleGrace time.Duration

	// StatePath is the file of the embedded store (bbolt) that keeps every
	// state namespace across restarts; "" keeps them in memory only.
	StatePath string

	// RelayDir is the directory of the relay's inbox store (package relay):
	// with it the broker is a relay for durable, end-to-end-sealed delivery
	// (docs/durable.md); "" turns the relay role off.
	RelayDir string
	// Relay tunes the relay's store (limits per device inbox, push rate,
	// TTL: package relay's Options; zero fields take its defaults). Its
	// Logger is the broker's.
	Relay relay.Options
	// RelayQuotaRate and RelayQuotaBurst are each principal's quota of
	// bytes pushed into the relay: a second, sustained, and at once. A
	// push past it is RATE_LIMITED. A principal allowed every channel
	// action has none. 0 is DefaultRelayQuotaRate / DefaultRelayQuotaBurst;
	// a negative rate turns quotas off.
	RelayQuotaRate, RelayQuotaBurst int

	// Cluster joins the broker to a bus of brokers through NATS
	// (docs/cluster.md); its zero value keeps the broker alone.
	Cluster ClusterOptions
}

func (o *Options) setDefaults() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	def(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	def(&o.ReceiptTimeout, DefaultReceiptTimeout)
	def(&o.HandshakeGrace, DefaultHandshakeGrace)
	switch {
	case o.HandshakeIdleGrace < 0:
		o.HandshakeIdleGrace = o.HandshakeGrace
	case o.HandshakeIdleGrace == 0:
		o.HandshakeIdleGrace = min(DefaultHandshakeIdleGrace, o.HandshakeGrace)
	}
	defInt(&o.RelayQuotaRate, DefaultRelayQuotaRate)
	defInt(&o.RelayQuotaBurst, DefaultRelayQuotaBurst)
	defInt(&o.MaxNodesPerPrincipal, DefaultMaxNodesPerPrincipal)
	def(&o.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&o.LeaseTimeout, DefaultLeaseTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.MaxTTL, DefaultMaxTTL)
	def(&o.DrainTimeout, DefaultDrainTimeout)
	defInt(&o.MaxQueueBytes, DefaultMaxQueueBytes)
	defInt(&o.MaxQueueMessages, DefaultMaxQueueMessages)
	defInt(&o.MaxInflight, DefaultMaxInflight)
	defInt(&o.MaxPayload, DefaultMaxPayload)
	defInt(&o.MaxConnections, DefaultMaxConnections)
	defInt(&o.MaxRegistrations, DefaultMaxRegistrations)
	defInt(&o.MaxHandshakes, DefaultMaxHandshakes)
	defInt(&o.MaxHandshakesPerAddr, DefaultMaxHandshakesPerAddr)
	switch {
	case o.LocalReserve == 0:
		o.LocalReserve = min(DefaultLocalReserve, o.MaxConnections/4)
	case o.LocalReserve < 0:
		o.LocalReserve = 0
	case o.LocalReserve > o.MaxConnections:
		return fmt.Errorf("broker: LocalReserve %d exceeds MaxConnections %d", o.LocalReserve, o.MaxConnections)
	}
	if err := o.Cluster.setDefaults(o.Name); err != nil {
		return err
	}
	if o.RelayDir == "" && slices.Contains(o.Cluster.Relays, o.Name) {
		return fmt.Errorf("broker: %s is one of Cluster.Relays but has no RelayDir to keep inboxes in", o.Name)
	}
	switch {
	case o.LeaseTimeout <= o.HeartbeatInterval:
		return fmt.Errorf("broker: LeaseTimeout %v must exceed HeartbeatInterval %v", o.LeaseTimeout, o.HeartbeatInterval)
	case o.MaxPayload > maxPayloadCeiling:
		return fmt.Errorf("broker: MaxPayload %d exceeds %d", o.MaxPayload, maxPayloadCeiling)
	case o.MaxQueueBytes < o.MaxPayload:
		return fmt.Errorf("broker: MaxQueueBytes %d is smaller than MaxPayload %d", o.MaxQueueBytes, o.MaxPayload)
	}
	return nil
}
