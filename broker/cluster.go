package broker

// Scale-out through NATS (docs/cluster.md). With Options.Cluster.URLs the
// broker connects to the user's NATS servers with the official client and
// shares its directory with every other broker on the same subject prefix:
// each broker publishes a snapshot of its own nodes and services (its
// share), on every change and every heartbeat; each keeps the other
// brokers' shares and drops a broker's whole share when it said goodbye or
// its lease ran out. A node name claimed on two brokers is settled by
// claims (cluster_claim.go). Without URLs none of this exists: b.cl is nil
// and every hook is a no-op.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// Defaults of ClusterOptions.
const (
	DefaultClusterHeartbeat      = time.Second
	DefaultClusterLease          = 3 * time.Second
	DefaultClusterConnectTimeout = 5 * time.Second
	DefaultClusterSubjectPrefix  = "busbar"
	// DefaultClusterTombstoneRetention is how long a broker keeps the
	// tombstone of a namespace dropped on the bus (docs/cluster.md).
	DefaultClusterTombstoneRetention = 7 * 24 * time.Hour
	// clusterPublishGap is the least time between two snapshots a change
	// triggers: a burst of registrations costs one snapshot per gap, not
	// one per node. The gap stretches to clusterPublishCost times what the
	// last snapshot took to build and send, so a large share, rebuilt on
	// every change (and decoded by every other broker, which takes about as
	// long), costs a small part of a core however fast it changes.
	clusterPublishGap  = 20 * time.Millisecond
	clusterPublishCost = 8
	// clusterReconnectWait is the NATS client's pause between reconnect
	// attempts; it retries for ever.
	clusterReconnectWait = 250 * time.Millisecond
	// clusterLeaveFlush bounds Shutdown's wait for its goodbye to reach
	// NATS.
	clusterLeaveFlush = 2 * time.Second
)

// ClusterOptions join the broker to a bus of brokers that share a NATS
// cluster (docs/cluster.md). The zero value (no URLs) is a lone broker.
type ClusterOptions struct {
	// URLs are the NATS servers to connect to (nats://host:4222, or
	// tls://…; user:password@ in a URL is passed to NATS). Empty: no
	// cluster, and nothing of NATS runs.
	URLs []string
	// CredsFile is a NATS credentials file (JWT and nkey seed), the way
	// brokers prove to NATS, and so to each other, who they are.
	CredsFile string
	// TLSCA is a PEM file of the CAs that sign the NATS servers'
	// certificates; TLSCert and TLSKey are this broker's client
	// certificate for NATS servers that verify clients.
	TLSCA, TLSCert, TLSKey string
	// SubjectPrefix is the first token of every subject the brokers use,
	// so several buses can share one NATS account.
	SubjectPrefix string
	// Heartbeat is how often the broker republishes its share of the
	// directory when nothing changed; Lease is how long the other brokers
	// keep that share without hearing from it. A broker that dies without
	// a goodbye drops from every directory within Lease + Heartbeat.
	Heartbeat, Lease time.Duration
	// ConnectTimeout bounds the first connection to NATS in New.
	ConnectTimeout time.Duration
	// Relays names the brokers that keep the durable relay's inboxes,
	// the same list on every broker of the bus: each device's inbox lives
	// on one of them (its home, by the device id), and every other broker
	// forwards that device's pushes, receive sessions and acks to it
	// (docs/cluster.md#durable-inboxes). Empty: each broker keeps the
	// inboxes of the pushes it takes, as a lone broker does.
	Relays []string
	// RelayTimeout bounds the wait for a home's answer to a forwarded
	// command; past it the command is answered UNAVAILABLE.
	RelayTimeout time.Duration
	// LinkWindow is the credit this broker grants each other broker's
	// link: the bytes of frames it may have sent beyond what this broker
	// took in (docs/cluster.md#flow-control). Default
	// DefaultClusterLinkWindow; at least MinClusterLinkWindow.
	LinkWindow int
	// LinkPendingBytes is the NATS client's pending limit for the links'
	// traffic to this broker: past it NATS drops whole batches, counted
	// as DropLinkLost. Its message limit is LinkPendingBytes / 32. Default
	// DefaultClusterLinkPendingBytes, which senders paced by LinkWindow
	// reach only when more than LinkPendingBytes / (LinkWindow + 2 ×
	// NATS's max_payload) brokers, 21 with the defaults, send at once.
	LinkPendingBytes int
	// BusKey is the key material the brokers of this bus share, and
	// nobody else (docs/cluster.md#bus-key): with it every message between
	// brokers is authenticated, so access to NATS alone cannot forge one,
	// and stamped, so none can be replayed. At least BusKeyMinBytes. Nil:
	// the brokers trust whatever NATS lets through.
	BusKey []byte
	// SealPayloads encrypts every message between brokers with BusKey
	// too, so access to NATS alone reads nothing either. Needs BusKey.
	SealPayloads bool
	// TombstoneRetention is how long the broker keeps the tombstone of a
	// state namespace dropped on the bus, from when it learnt of the drop
	// (docs/cluster.md#dropping-a-namespace-and-giving-it-a-new-owner): a
	// broker that was away longer and still holds the namespace brings it
	// back.
	TombstoneRetention time.Duration
}

func (o *ClusterOptions) enabled() bool { return len(o.URLs) > 0 }

func (o *ClusterOptions) setDefaults(name string) error {
	if !o.enabled() {
		return nil
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = DefaultClusterHeartbeat
	}
	if o.Lease == 0 {
		o.Lease = DefaultClusterLease
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultClusterConnectTimeout
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = DefaultClusterSubjectPrefix
	}
	if o.RelayTimeout == 0 {
		o.RelayTimeout = DefaultClusterRelayTimeout
	}
	if o.LinkWindow == 0 {
		o.LinkWindow = DefaultClusterLinkWindow
	}
	if o.LinkPendingBytes == 0 {
		o.LinkPendingBytes = DefaultClusterLinkPendingBytes
	}
	if o.TombstoneRetention == 0 {
		o.TombstoneRetention = DefaultClusterTombstoneRetention
	}
	for _, r := range o.Relays {
		if r == "" || strings.ContainsAny(r, " \t\r\n*>.") {
			return fmt.Errorf("broker: Cluster.Relays: %q is not a broker name", r)
		}
	}
	switch {
	case name == DefaultName:
		return fmt.Errorf("broker: a broker joining a bus needs a name of its own (Name is the default %q)", DefaultName)
	case o.TombstoneRetention < 0:
		return fmt.Errorf("broker: Cluster.TombstoneRetention %v is negative", o.TombstoneRetention)
	case o.Lease < 2*o.Heartbeat:
		return fmt.Errorf("broker: Cluster.Lease %v must be at least twice Cluster.Heartbeat %v", o.Lease, o.Heartbeat)
	case o.LinkWindow < MinClusterLinkWindow:
		return fmt.Errorf("broker: Cluster.LinkWindow %d is below the least window, %d bytes", o.LinkWindow, MinClusterLinkWindow)
	case o.LinkPendingBytes < linkMinMessage:
		return fmt.Errorf("broker: Cluster.LinkPendingBytes %d is below %d bytes, the smallest link message", o.LinkPendingBytes, linkMinMessage)
	case o.SealPayloads && o.BusKey == nil:
		return errors.New("broker: Cluster.SealPayloads needs a Cluster.BusKey")
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return errors.New("broker: Cluster.TLSCert and Cluster.TLSKey go together")
	case strings.ContainsAny(o.SubjectPrefix, " \t\r\n*>") || strings.HasPrefix(o.SubjectPrefix, ".") || strings.HasSuffix(o.SubjectPrefix, "."):
		return fmt.Errorf("broker: Cluster.SubjectPrefix %q is not a NATS subject prefix", o.SubjectPrefix)
	}
	return nil
}

// ErrCluster wraps a failure to join the bus in New.
var ErrCluster = errors.New("broker: cannot join the bus")

// cluster is the broker's side of the bus: its NATS connection, the other
// brokers' shares of the directory and the goroutine that publishes its own.
type cluster struct {
	b    *Broker
	opts ClusterOptions
	nc   *nats.Conn
	iid  string // this broker process, so a restart is told from a duplicate name
	subj subjects
	subs []*nats.Subscription

	key  *busKey    // nil: no bus key (cluster_buskey.go)
	pub  publishing // the order of what this broker publishes, with a key
	room int        // what an envelope adds to a message at most; 0 without a key

	dirty  chan struct{} // 1 slot: the directory changed since the last snapshot
	resync chan struct{} // 1 slot: every namespace is owed to the bus (cluster_state.go)
	stop   chan struct{}
	done   sync.WaitGroup // the publisher

	gen uint64 // owned by the publisher: the generation of the last snapshot

	mu    sync.RWMutex     // guards the fields below; never held while taking another lock
	peers map[string]*peer // by broker name
	// Rebuilt from peers on every change (index): the other brokers'
	// nodes by name (for a name on two brokers, the newer claim), their
	// services' nodes by service, and their brokers by subscribed channel.
	nodes   map[string]shareNode
	svcs    map[string][]member // by service
	subbers *subIndex[string]
	// The other brokers' queue members (cluster_publish.go): nil when
	// none of their nodes is a queue's member.
	queues *remoteQueues

	view    hotpath.View       // owned by onLink, the links' one reader
	in      map[string]*linkIn // owned by onLink: each sender's link (cluster_credit.go)
	verdict fromVerdict        // owned by onLink
	held    held               // owned by onLink: what a link message's frames queued, flushed once they are routed

	relay relayForwards // the durable commands forwarded to other brokers (cluster_relay.go)

	// edgeKeys (guarded by mu) are the fingerprints of this broker's edge
	// protocols' keys, shared with the bus; edgeHeard (1 slot) is poked
	// when a peer's page names any (cluster_edgekey.go).
	edgeKeys  map[string]string
	edgeHeard chan struct{}
	// edgeVer (guarded by mu) numbers the changes of edgeKeys;
	// edgeShared is the last of them a published share carried, and
	// edgeSent (1 slot) is poked when it rises.
	edgeVer    uint64
	edgeShared atomic.Uint64
	edgeSent   chan struct{}

	smu      sync.Mutex           // guards repaired
	repaired map[string]time.Time // namespaces republished on a digest, when (cluster_state.go)

	lmu   sync.Mutex       // guards links and closed
	links map[string]*link // by broker name (cluster_link.go)
	// linkSnap is a copy of links as of its last change, read without
	// lmu (link).
	linkSnap atomic.Pointer[map[string]*link]
	closed   bool
	linkWG   sync.WaitGroup // each link's writer and its watcher
}

// subjects are the prefixes of the subjects the brokers use; each ends
// with the name of the broker that publishes on it (subscribed to with
// "*"), so NATS permissions can pin every broker to its own
// (docs/cluster.md#trust).
type subjects struct{ dir, bye, claim, link, credit, state, relay, relayed string }

// sender is the broker that published m: its subject's last token.
func sender(m *nats.Msg) string { return m.Subject[strings.LastIndexByte(m.Subject, '.')+1:] }

// joinCluster connects to NATS, sets b.cl and starts sharing the
// directory. It does nothing when the options name no NATS server.
func joinCluster(b *Broker) error {
	o := b.opts.Cluster
	if !o.enabled() {
		return nil
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	cl := &cluster{
		b: b, opts: o, iid: hex.EncodeToString(id[:]),
		subj: subjects{dir: o.SubjectPrefix + ".dir.", bye: o.SubjectPrefix + ".bye.", claim: o.SubjectPrefix + ".claim.",
			link: o.SubjectPrefix + ".to." + b.opts.Name + ".", credit: o.SubjectPrefix + ".credit." + b.opts.Name + ".", state: o.SubjectPrefix + ".state.",
			relay: o.SubjectPrefix + ".relay." + b.opts.Name + ".", relayed: o.SubjectPrefix + ".relayed." + b.opts.Name + "."},
		dirty: make(chan struct{}, 1), resync: make(chan struct{}, 1), stop: make(chan struct{}), edgeHeard: make(chan struct{}, 1), edgeSent: make(chan struct{}, 1),
		peers: map[string]*peer{}, links: map[string]*link{}, in: map[string]*linkIn{},
	}
	if o.BusKey != nil {
		k, err := newBusKey(o.BusKey, o.SealPayloads)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCluster, err)
		}
		cl.key = k
		cl.room = BusKeyRoom(o.SubjectPrefix)
	}
	opts := []nats.Option{
		nats.Name("busbar broker " + b.opts.Name),
		nats.Timeout(o.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(clusterReconnectWait),
		nats.ReconnectHandler(func(*nats.Conn) {
			b.log.Info("bus: reconnected to NATS")
			cl.changed()   // the others may have dropped our share meanwhile
			cl.syncState() // and missed our writes
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				b.log.Warn("bus: disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			b.log.Warn("bus: NATS error", "err", err)
		}),
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	nc, err := nats.Connect(strings.Join(o.URLs, ","), opts...)
	if err != nil {
		return fmt.Errorf("%w: NATS at %s: %v", ErrCluster, strings.Join(o.URLs, ","), err)
	}
	cl.nc = nc
	b.cl, b.bus = cl, cl              // before any handler runs: they route through b
	b.reg.remote = cl.remoteInstances // the registry's collisions are the bus's (cluster_collide.go)
	for subj, h := range map[string]nats.MsgHandler{cl.subj.dir: cl.onShare, cl.subj.bye: cl.onBye, cl.subj.claim: cl.onClaim, cl.subj.link: cl.onLink, cl.subj.credit: cl.onCredit, cl.subj.state: cl.onState, cl.subj.relay: cl.onRelay, cl.subj.relayed: cl.onRelayed} {
		s, err := nc.Subscribe(subj+"*", cl.guarded(h))
		if err != nil {
			nc.Close()
			return fmt.Errorf("%w: subscribe %s: %v", ErrCluster, subj, err)
		}
		if subj == cl.subj.link {
			_ = s.SetPendingLimits(o.LinkPendingBytes/linkMinMessage, o.LinkPendingBytes) // both > 0: setDefaults checked
		}
		cl.subs = append(cl.subs, s)
	}
	if err := nc.FlushTimeout(o.ConnectTimeout); err != nil { // the subscriptions are in place before anyone is told we exist
		nc.Close()
		return fmt.Errorf("%w: %v", ErrCluster, err)
	}
	b.log.Info("bus: joined", "nats", nc.ConnectedUrlRedacted(), "prefix", o.SubjectPrefix, "instance", cl.iid, "bus_key", cl.keyMode())
	cl.done.Add(1)
	go cl.publisher()
	return nil
}

// changed notes that this broker's share changed; the publisher sends a
// snapshot within clusterPublishGap.
func (cl *cluster) changed() { poke(cl.dirty) }

// poke fills a 1-slot signal channel unless it is full already.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// publisher sends this broker's share on every change (at most one per
// clusterPublishGap) and every heartbeat, and expires silent peers.
func (cl *cluster) publisher() {
	defer cl.done.Done()
	tick := time.NewTicker(cl.opts.Heartbeat)
	defer tick.Stop()
	var last time.Time
	gap := clusterPublishGap
	for {
		select {
		case <-cl.stop:
			return
		case now := <-tick.C:
			cl.expire(now)
			cl.relayTick(now)
			cl.publishDigest(now)
		case <-cl.resync:
			cl.publishAllState()
			continue
		case <-cl.dirty:
			if wait := gap - time.Since(last); wait > 0 {
				select {
				case <-cl.stop:
					return
				case <-time.After(wait):
				}
			}
		}
		start := time.Now()
		cl.publishShare()
		last = time.Now()
		gap = max(clusterPublishGap, clusterPublishCost*last.Sub(start))
	}
}

// leave says goodbye, so the others drop this broker's share at once,
// stops the publisher and closes the NATS connection.
func (cl *cluster) leave() {
	close(cl.stop)
	cl.done.Wait()
	if body, err := wire.JSON(byeMsg{Broker: cl.b.opts.Name, IID: cl.iid}); err == nil {
		_ = cl.publish(cl.subj.bye+cl.b.opts.Name, nil, body)
	}
	cl.closeLinks()
	if cl.nc.IsConnected() { // cut off, nobody would hear it: do not wait
		_ = cl.nc.FlushTimeout(clusterLeaveFlush)
	}
	for _, s := range cl.subs {
		_ = s.Unsubscribe()
	}
	cl.nc.Close()
}

// keyMode says how this broker's messages cross NATS, for the log.
func (cl *cluster) keyMode() string {
	switch {
	case cl.key == nil:
		return "none"
	case cl.opts.SealPayloads:
		return "sealed"
	}
	return "authenticated"
}

// maxPayload is the most a message of this broker's may carry through
// NATS before its envelope.
func (cl *cluster) maxPayload() int { return int(cl.nc.MaxPayload()) - cl.room }

// isPeer reports whether name is another broker's name on the bus: no
// node may take it (a broker's name is its own endpoint).
func (cl *cluster) isPeer(name string) bool {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	_, ok := cl.peers[name]
	return ok
}

// errPeerName refuses a node that would take a peer broker's name.
func errPeerName(node string) error {
	return fmt.Errorf("%w: %q is the name of a broker on the bus", auth.ErrNodeNotAllowed, node)
}
