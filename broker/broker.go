package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/edge"
	"busbar/internal/hotpath"
	"busbar/transport"
	"busbar/wire"
)

// ErrClosed is returned by Serve and DialInProcess once Shutdown began.
var ErrClosed = errors.New("broker: closed")

// Broker routes messages between connected nodes. Create it with New, feed
// it connections with Serve or ServeConn, stop it with Shutdown.
type Broker struct {
	opts   Options
	log    *slog.Logger
	dir    directory
	reg    registry
	state  stateService
	pend   pendingTable
	groups groups // service groups' turns and loads (groups.go)
	hs     handshakes
	relay  relayRole
	// relayQuotas are the per-principal byte quotas of pushes (relayquota.go).
	relayQuotas relayQuotas
	// bus is the other brokers, as routing sees them (bus.go): alone
	// unless Options.Cluster names NATS servers; then it is cl, the
	// cluster (cluster.go), which is nil on a broker on its own.
	bus  bus
	cl   *cluster
	taps taps // busbar tap (tap.go)

	// ctx ends when Shutdown closes the connections: work the broker runs
	// for them (relay pushes, deliveries) stops with it.
	ctx    context.Context
	cancel context.CancelFunc

	// refusals is the rate-limited log of refusals every door shares
	// (edge.RefusalLog): the broker's own and its adapters' (Refusals).
	refusals *edge.RefusalLog

	// closing is set once, under mu, when Shutdown begins; read anywhere
	// (the hot path refuses new work without taking mu).
	closing atomic.Bool
	started time.Time // the base of conn.readAt (monotonic)

	mu        sync.Mutex // guards the fields below
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{} // every connection being served, registered or not
	external  int                // conns not in-process, for MaxConnections
	network   int                // of external, network peers: at most MaxConnections - LocalReserve

	serving sync.WaitGroup // one per ServeConn and per Serve loop
	sweeper sync.WaitGroup // sweep and sampleHistory
	history sampleRing
	stop    chan struct{} // closed by Shutdown

	stats   stats
	traffic traffic   // per-message metrics (metrics_counters.go)
	events  eventRing // recent events for the dashboard (metrics_events.go)
}

// New returns a broker with opts (see Options for defaults).
func New(opts Options) (*Broker, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	b := &Broker{
		bus:       alone{},
		opts:      opts,
		log:       opts.Logger,
		refusals:  edge.NewRefusalLog(opts.Logger),
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		stop:      make(chan struct{}),
		started:   time.Now(),
	}
	b.dir.init()
	b.dir.maxPerPrincipal = opts.MaxNodesPerPrincipal
	b.hs.init()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.reg.init()
	b.pend.init()
	if err := b.state.open(opts.StatePath, b.log); err != nil {
		b.cancel()
		return nil, err
	}
	if err := b.relay.open(opts.RelayDir, opts.Relay, b.log); err != nil {
		b.cancel()
		_ = b.state.close()
		return nil, err
	}
	if err := joinCluster(b); err != nil {
		b.cancel()
		_ = b.relay.close()
		_ = b.state.close()
		return nil, err
	}
	b.sweeper.Add(2)
	go b.sweep()
	go b.sampleHistory()
	return b, nil
}

// Name is the broker's own node name.
func (b *Broker) Name() string { return b.opts.Name }

// Uptime is how long ago the broker was made.
func (b *Broker) Uptime() time.Duration { return time.Since(b.started) }

// Serve accepts connections from ln until ln fails or Shutdown closes it.
// It returns ErrClosed after Shutdown. A temporary accept failure (out of
// file descriptors) is retried after a growing pause (edge.Accept): it
// never stops the broker.
func (b *Broker) Serve(ln net.Listener) error {
	b.mu.Lock()
	if b.closing.Load() {
		b.mu.Unlock()
		_ = ln.Close()
		return ErrClosed
	}
	b.listeners[ln] = struct{}{}
	b.serving.Add(1)
	b.mu.Unlock()
	defer b.serving.Done()
	err := edge.Accept(ln, ln.Addr().Network(), b.log, func(nc net.Conn) { go b.ServeConn(nc) })
	b.mu.Lock()
	closing := b.closing.Load()
	delete(b.listeners, ln)
	b.mu.Unlock()
	if closing {
		return ErrClosed
	}
	return err
}

// ServeConn serves one connection until it closes: handshake, then frames.
// It takes ownership of nc. Every transport ends here.
func (b *Broker) ServeConn(nc net.Conn) { b.serveConn(nc, false) }

// DialInProcess returns a connection to this broker that never leaves the
// process. Its node is trusted: no credential is checked, every permission
// is granted, and it may use the broker's own name (the broker as an
// endpoint, docs/messaging.md#the-model).
func (b *Broker) DialInProcess() (net.Conn, error) { return b.dialInProcess(nil) }

// DialInProcessAs returns an in-process connection whose node is p,
// already authenticated by the caller (an adapter at the edge, such as
// package moonbridge, that checked the foreign protocol's own proof): no
// credential is asked for, but the node name must be one p may claim and
// not the broker's own, and p's permissions apply as to any connection.
func (b *Broker) DialInProcessAs(p *auth.Principal) (net.Conn, error) {
	if p == nil {
		return nil, errors.New("broker: DialInProcessAs needs a principal")
	}
	return b.dialInProcess(p)
}

func (b *Broker) dialInProcess(as *auth.Principal) (net.Conn, error) {
	cl, srv, err := transport.Pipe()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	closing := b.closing.Load()
	b.mu.Unlock()
	if closing {
		_ = cl.Close()
		_ = srv.Close()
		return nil, ErrClosed
	}
	go b.serveConnAs(srv, as)
	return cl, nil
}

func (b *Broker) serveConn(nc net.Conn, inproc bool) {
	if inproc {
		b.serveConnAs(nc, nil)
		return
	}
	b.serveConnOf(nc, false, nil)
}

// serveConnAs serves an in-process connection, trusted (as nil) or
// authenticated as a principal.
func (b *Broker) serveConnAs(nc net.Conn, as *auth.Principal) { b.serveConnOf(nc, true, as) }

func (b *Broker) serveConnOf(nc net.Conn, inproc bool, as *auth.Principal) {
	c := newConn(b, nc)
	c.inproc, c.as = inproc, as
	if r := b.track(c); r != nil {
		refuseConn(nc, r.result, r.text)
		return
	}
	defer b.untrack(c)
	c.hello = helloMeter{c: c}
	r := wire.NewReader(&c.hello)
	// Before login a frame is a hello: MaxHelloBytes is plenty, and an
	// unauthenticated peer may make the broker hold no more (admission.go).
	r.SetLimit(MaxHelloBytes)
	transport.SetFrameLimit(nc, MaxHelloBytes) // a WebSocket holds a whole message before r sees it
	go c.writeLoop()
	if !inproc && !b.admitHandshake(c) {
		c.finish()
		return
	}
	err := b.handshake(c, r)
	b.handshakeDone(c)
	if err != nil {
		// Debug: a flood of connections that never log in would otherwise
		// write a line each; evictions and refusals are logged, throttled.
		b.log.Debug("handshake failed", "remote", remote(nc), "err", clip(err.Error()))
		b.handshakeFailed(c)
		c.finish()
		return
	}
	transport.Established(nc) // from now on a WebSocket closes with a handshake
	// A frame is refused before it is read when it could not be routed
	// anyway: the payload limit plus room for its headers.
	r.SetLimit(b.opts.MaxPayload + MaxFrameOverhead)
	transport.SetFrameLimit(nc, b.opts.MaxPayload+MaxFrameOverhead)
	b.log.Debug("node connected", "node", c.node, "epoch", c.epoch, "remote", remote(nc))
	b.readLoop(c, r)
	c.finish()
	c.endDurable()
	b.dir.remove(c)
	b.bus.changed()
	b.retire(c)
	b.dropPending(c)
	c.mu.Lock()
	reason := c.reason
	c.mu.Unlock()
	b.log.Debug("node disconnected", "node", c.node, "epoch", c.epoch, "reason", reason)
}

// retire removes what c announced and watched. It runs when c stops being
// its node's connection — replaced, lease expired — not only when its
// serving goroutine ends, which may wait WriteTimeout for a stuck writer;
// running it twice is harmless.
func (b *Broker) retire(c *conn) {
	b.leave(c)
	b.taps.remove(c)
	b.state.leave(c)
	c.stopDelivery()
}

func remote(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	return "local"
}

// remoteHost is the source address a refusal from nc is logged under
// (edge.RefusalLog): its host for a network peer, "" for a local one.
func remoteHost(nc net.Conn) string {
	if addr, local := peerAddr(nc); !local {
		return addr
	}
	return ""
}

// Refusals is the rate-limited refusal log the broker writes to, for the
// doors of the same process to share (edge.RefusalLog).
func (b *Broker) Refusals() *edge.RefusalLog { return b.refusals }

// Logger is the broker's log, for the doors of the same process.
func (b *Broker) Logger() *slog.Logger { return b.log }

// Door is the shared door for an adapter of the same process: the
// broker's log, its refusal log, and its login pools as the pre-login
// admission (HoldLoginPlace).
func (b *Broker) Door() edge.Door {
	return edge.Door{Log: b.log, Refusals: b.refusals, Hold: b.HoldLoginPlace}
}

// track counts c as served, or refuses it: the broker is shutting down,
// or serves MaxConnections already.
func (b *Broker) track(c *conn) *refusal {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing.Load() {
		return refuse(wire.ResultShutdown, "broker shutting down")
	}
	_, local := peerAddr(c.nc)
	c.local = local
	full := b.external >= b.opts.MaxConnections
	if !local {
		full = full || b.network >= b.opts.MaxConnections-b.opts.LocalReserve
	}
	if !c.inproc && full {
		b.stats.overCapacity.Add(1)
		b.refusals.Warn("connection refused: at capacity", remoteHost(c.nc), "max_connections", b.opts.MaxConnections, "local_reserve", b.opts.LocalReserve)
		return refuse(wire.ResultOverload, "the broker serves its limit of "+strconv.Itoa(b.opts.MaxConnections)+" connections ("+
			strconv.Itoa(b.opts.LocalReserve)+" of them kept for local peers); retry later")
	}
	b.conns[c] = struct{}{}
	if !c.inproc {
		b.external++
		if !local {
			b.network++
		}
	}
	b.serving.Add(1)
	return nil
}

func (b *Broker) untrack(c *conn) {
	b.mu.Lock()
	delete(b.conns, c)
	if !c.inproc {
		b.external--
		if !c.local {
			b.network--
		}
	}
	b.stats.expiredInQueue.Add(c.out.Expired()) // under mu: Stats never counts c twice
	b.traffic.retire(&c.meter)                  // under mu: Traffic never counts c twice
	b.mu.Unlock()
	b.serving.Done()
}

// readLoop reads frames until the connection fails or closes, and hands
// each to dispatch. An oversize or truncated frame ends the connection; a
// malformed one leaves the stream in sync, so dispatch answers it and the
// node stays.
func (b *Broker) readLoop(c *conn, r *wire.Reader) {
	var v hotpath.View
	var h held // what the frames of one read queued, flushed before the next read
	defer h.flush()
	for {
		if !r.FrameReady() {
			c.readAt.Store(0) // the next frame may need a read
			h.flush()
		}
		frame, err := r.ReadFrame()
		c.meter.batch(r.FrameReady())
		switch {
		case err == nil:
		case errors.Is(err, wire.ErrMalformed): // the stream is in sync
			if b.malformedFrame(c, err) {
				return
			}
			continue
		case errors.Is(err, wire.ErrTooLarge):
			b.refusals.Warn("oversize frame; closing", remoteHost(c.nc), "node", c.node, "err", err)
			b.answer(c, subject{kind: kindFrame}, fatal(wire.ResultTooLarge, err.Error()))
			return
		default:
			c.close(wire.ResultDisconnect)
			return
		}
		if c.out.Closing() {
			return // replaced, expired or shutting down: route nothing more as this node
		}
		b.dispatchHeld(c, frame, &v, &h)
	}
}
