package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/transport"
	"busbar/wire"
)

// conn is one connection to a broker. A client has at most one live
// (Client.cur); reconnecting makes a new one, never revives an old one, so
// nothing of a lost connection (its calls, its replies, its receipts) can
// reach the next one.
type conn struct {
	// Set once by dialConn before the loops start; read-only after.
	server  string // the endpoint dialled; "" with Options.Dial
	nc      net.Conn
	out     *sendq.Queue // safe for concurrent use; its lock is taken last
	welcome wire.Welcome
	nonce   []byte // the broker's bus.info nonce

	said    atomic.Pointer[error] // why the broker or the heartbeat is ending it, before the socket closes
	active  atomic.Bool           // a frame arrived since the heartbeat's last tick: set by the reader, swapped by heartbeat
	streams []streamItem          // stream messages not yet handed to the executor; owned by the reader

	err  error         // why it ended; written by lost before done is closed
	done chan struct{} // closed by lost, once
	// replaced: the broker ended it because another connection of the
	// node took over; written by brokerSays on the reader, read after done.
	replaced bool

	loops sync.WaitGroup // its writer, reader and heartbeat
}

// dialConn dials server (or Options.Dial) and performs the handshake.
func (c *Client) dialConn(ctx context.Context, server string) (*conn, *wire.Reader, error) {
	var (
		nc  net.Conn
		err error
	)
	if c.opts.Dial != nil {
		nc, err = c.opts.Dial(ctx)
	} else {
		var ep transport.Endpoint
		if ep, err = transport.ParseEndpoint(server); err == nil {
			nc, err = transport.Dial(ctx, ep, c.opts.TLS)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	cn := &conn{server: server, nc: nc, done: make(chan struct{})}
	r := wire.NewReader(nc)
	if err := c.handshake(ctx, cn, r); err != nil {
		_ = nc.Close()
		return nil, nil, err
	}
	cn.out = sendq.New(nc, sendq.Limits{MaxBytes: c.opts.MaxQueueBytes, MaxMessages: c.opts.MaxQueueMessages, WriteTimeout: c.opts.WriteTimeout})
	return cn, r, nil
}

// handshake reads bus.info, sends bus.hello and reads the welcome, under
// ctx's deadline (or Options.HandshakeTimeout). It presents the node name, IID
// and credential of Options; on a reconnect, the IID the first broker
// gave when Options had none.
func (c *Client) handshake(ctx context.Context, cn *conn, r *wire.Reader) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.opts.HandshakeTimeout)
	}
	_ = cn.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(time.Now()) })
	defer stop()

	m, err := r.ReadMessage()
	if errors.Is(err, wire.ErrTooLarge) || errors.Is(err, wire.ErrMalformed) {
		// A NATS server's "INFO {" reads as a 1.2 GB length prefix.
		return fmt.Errorf("%w (its first bytes are no busbar frame: %v)", ErrNotBroker, err)
	}
	if err != nil {
		return fmt.Errorf("client: reading broker info: %w", ctxErr(ctx, err))
	}
	if m.Value(wire.HeaderCommand) == wire.CmdError { // refused before the handshake
		return refusedError(m)
	}
	var info wire.Info
	if m.Value(wire.HeaderCommand) != wire.CmdInfo || json.Unmarshal(m.Body(), &info) != nil {
		return fmt.Errorf("%w (it did not start with %s)", ErrNotBroker, wire.CmdInfo)
	}
	cn.nonce = info.Nonce
	hello := wire.Hello{Node: c.opts.Node, IID: c.opts.IID, Principal: c.opts.Credential.Principal, Secret: c.opts.Credential.Secret}
	if c.opts.PrivateKey != nil {
		hello.Secret = ""
		hello.Signature = edSign(c.opts.PrivateKey, auth.SignedMessage(info.Nonce, c.opts.Node))
	}
	compatible := speaks(info)
	if !compatible {
		// Still say hello, so the broker can log the mismatch too, but
		// never hand a secret to a peer that speaks another protocol.
		hello = wire.Hello{Node: c.opts.Node}
	}
	body, _ := json.Marshal(hello)
	req := wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).
		WithHeader(wire.HeaderID, newID()).WithBody(body)
	w := wire.NewWriter(cn.nc)
	if err := w.WriteMessage(req); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("client: sending hello: %w", ctxErr(ctx, err))
	}
	resp, err := r.ReadMessage()
	if !compatible { // whatever the broker answered
		return versionError(info, "")
	}
	if err != nil {
		return fmt.Errorf("client: reading welcome: %w", ctxErr(ctx, err))
	}
	if resp.Value(wire.HeaderCommand) == wire.CmdError { // closed while logging in
		return refusedError(resp)
	}
	if rc := wire.ResponseRC(resp); rc.IsError() {
		text := resp.Value(wire.HeaderError)
		switch wire.Result(resp.Value(wire.HeaderResult)) {
		case wire.ResultVersion:
			return versionError(info, text)
		case wire.ResultAuth:
			return fmt.Errorf("%w: %s", ErrAuth, text)
		}
		return fmt.Errorf("client: handshake refused: %s", text)
	}
	if err := json.Unmarshal(resp.Body(), &cn.welcome); err != nil {
		return fmt.Errorf("client: malformed welcome: %w", err)
	}
	_ = cn.nc.SetDeadline(time.Time{})
	return nil
}

// speaks reports whether the broker of info accepts this client's
// protocol version: within its Min..Max, or, from a broker that announces
// no range, its one Protocol.
func speaks(info wire.Info) bool {
	if info.Min == 0 && info.Max == 0 {
		return info.Protocol == wire.ProtocolVersion
	}
	have, err := strconv.Atoi(wire.ProtocolVersion)
	return err == nil && info.Min <= have && have <= info.Max
}

// versionError is the handshake's failure with a broker of info that
// speaks no version of this client's.
func versionError(info wire.Info, text string) error {
	lo, hi := info.Min, info.Max
	if lo == 0 && hi == 0 {
		v, _ := strconv.Atoi(info.Protocol)
		lo, hi = v, v
	}
	return &VersionError{Min: lo, Max: hi, Have: wire.ProtocolVersion, Text: text}
}

// refusedError is the error for a bus.error the broker sent instead of
// serving the connection: at capacity, too many logging in, a hello too
// large.
func refusedError(m *wire.Message) error {
	return fmt.Errorf("%w: %s: %s", ErrRefused, m.Value(wire.HeaderResult), m.Value(wire.HeaderError))
}

// ctxErr prefers the context's error when it caused the I/O error.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// startWriter starts cn's writer and heartbeat; startReader its reader.
// A reconnect queues what it restores between the two, so the replicas
// the reader owns are handed over before it runs.
func (c *Client) startWriter(cn *conn) {
	cn.loops.Add(2)
	go func() { defer cn.loops.Done(); _ = cn.out.Run() }()
	go func() { defer cn.loops.Done(); c.heartbeat(cn) }()
}

func (c *Client) startReader(cn *conn, r *wire.Reader) {
	cn.loops.Add(1)
	go func() { defer cn.loops.Done(); c.readLoop(cn, r) }()
}

// readLoop reads cn's frames until it ends, then hands it to lost.
func (c *Client) readLoop(cn *conn, r *wire.Reader) {
	var (
		v   hotpath.View
		now hotpath.Instant // when the frames in the buffer were read; zero once it drains
	)
	for {
		if !r.FrameReady() {
			now = 0
		}
		frame, err := r.ReadFrame()
		if err == nil {
			err = hotpath.ParseView(frame, &v)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				c.flushStreams(cn)
				c.lost(cn, cn.endReason(err))
				return
			}
			c.log.Warn("malformed frame from broker", "err", err)
			continue
		}
		cn.active.Store(true) // the heartbeat loop turns this into lastRead
		c.handleFrame(cn, &v, &now)
		if !r.FrameReady() {
			c.flushStreams(cn) // the next read may wait: hand the batch over first
		}
	}
}

// handleFrame handles one frame from the broker on the reader. Streams,
// requests and the replies to requests take the hot path (no decode);
// the rest is decoded and dispatched.
func (c *Client) handleFrame(cn *conn, v *hotpath.View, now *hotpath.Instant) {
	typ := v.Value(wire.HeaderType)
	switch {
	case v.IsHeartbeat():
		return
	case typ == wire.TypeStream:
		c.deliverStream(cn, v, now)
		return
	}
	c.flushStreams(cn) // keep stream messages before what follows them
	switch {
	case typ == wire.TypeRequest:
		c.deliverRequestView(cn, v, now)
	case typ == wire.TypeResponse && c.answerView(v):
	default:
		m, err := v.Message()
		if err != nil {
			return // cannot happen: the view parsed
		}
		c.dispatch(cn, m)
	}
}

// endReason keeps the stated reason (the broker's bus.error, a silent
// broker) over the I/O error it caused.
func (cn *conn) endReason(err error) error {
	if why := cn.said.Load(); why != nil {
		return *why
	}
	return fmt.Errorf("%w: %v", ErrDisconnect, err)
}

// brokerSays records a bus.error: fatal ones precede the broker's close.
func (c *Client) brokerSays(cn *conn, m *wire.Message) {
	res, text := m.Value(wire.HeaderResult), m.Value(wire.HeaderError)
	c.log.Warn("broker reported an error", "result", res, "error", text)
	if wire.Result(res) == wire.ResultMalformed {
		return // the connection stays up
	}
	why := fmt.Errorf("%w: broker closed the connection: %s: %s", ErrDisconnect, res, text)
	if cn.said.CompareAndSwap(nil, &why) && wire.Result(res) == wire.ResultReplaced {
		cn.replaced = true
	}
}

// heartbeat keeps cn's lease: it sends a heartbeat after HeartbeatMS of
// silence, and ends cn when the broker has been silent for LeaseMS.
func (c *Client) heartbeat(cn *conn) {
	interval := time.Duration(cn.welcome.HeartbeatMS) * time.Millisecond
	lease := time.Duration(cn.welcome.LeaseMS) * time.Millisecond
	if interval <= 0 || lease <= 0 {
		return
	}
	t := time.NewTicker(interval / 4)
	defer t.Stop()
	lastRead := time.Now() // the last tick that saw a frame; owned here
	for {
		select {
		case <-cn.done:
			return
		case now := <-t.C:
			if cn.active.Swap(false) {
				lastRead = now
			}
			if now.Sub(lastRead) > lease {
				why := fmt.Errorf("%w: broker silent for %v", ErrDisconnect, lease)
				cn.said.CompareAndSwap(nil, &why)
				cn.out.Close(nil) // the writer closes the socket: the reader ends it
				return
			}
			if now.Sub(cn.out.LastWrite()) >= interval {
				// Dropped, counted, when the queue is full: frames are then
				// waiting to be written, which tells the broker as much, and
				// a writer that cannot write them ends the connection
				// (WriteTimeout).
				c.queueOrCount(cn, wire.Empty(), time.Time{}, &c.drops.heartbeats)
			}
		}
	}
}

// lost ends cn (on its reader, once): it is no longer the live
// connection, every call open on it fails with why (never replayed), the
// relay receive session ends, and the supervisor, waiting on cn.done,
// reconnects or ends the client.
func (c *Client) lost(cn *conn, why error) {
	c.mu.Lock()
	if c.cur.Load() == cn {
		c.cur.Store(nil)
		c.up = make(chan struct{})
	}
	var failed []*pending
	for id, p := range c.calls {
		if p.cn == cn {
			failed = append(failed, p)
			delete(c.calls, id)
		}
	}
	c.mu.Unlock()
	for _, p := range failed {
		p.fail(why)
	}
	if s := c.durable.Load(); s != nil {
		s.end() // its deliveries came on cn; the relay sends what is unacked to the next session
	}
	cn.out.Close(nil)
	cn.err = why
	close(cn.done)
}
