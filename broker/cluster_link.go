package broker

// Messages between brokers. Each other broker is a link: an endpoint
// whose queue and writer are a connection's, but whose "socket" publishes
// the frames to NATS, a batch per message, on <prefix>.to.<peer>.<self>.
// So a message for a node on another broker takes the one pipeline of
// route.go, the link being its dest: it is admitted and permitted here,
// its call is opened here keyed by the link, and it is encoded once with
// its from and a ttl slot that the link's writer fills with the time left
// as it leaves, so the deadline covers the queue and the hop. The peer
// broker's onLink hands it to dispatchLink (route_link.go), which
// delivers it to the node, and the answer comes back the same way to the
// call opened here.
//
// What a link sends was stamped by this broker (from is the sender's
// address); a link may not forge another broker's nodes: the receiver
// drops a frame whose from is one of its own nodes or a node of a third
// broker (fromAllowed). The subject's last token names the sending
// broker, so NATS permissions can pin each broker to its own subjects
// (docs/cluster.md#trust).

import (
	"encoding/binary"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/internal/sendq"
	"busbar/wire"
)

// linkSubject is where frames for broker to from broker from go.
func (cl *cluster) linkSubject(to, from string) string {
	return cl.opts.SubjectPrefix + ".to." + to + "." + from
}

// link is a link to another broker: an endpoint whose queue and writer
// are a connection's, but whose "socket" (linkConn) publishes to NATS. As
// a dest it stands for that broker's nodes: it takes every channel, and
// that broker decides; what it sends here is routed by dispatchLink.
type link struct {
	endpoint
	cl *cluster
}

func (l *link) ep() *endpoint                   { return &l.endpoint }
func (l *link) hasSub(string) bool              { return true }
func (l *link) hasHandler(string) bool          { return true }
func (l *link) allows(auth.Action, string) bool { return true }
func (l *link) address(node string) string      { return node + ".bus" }
func (l *link) fits(fw *forward) bool           { return l.cl.frameFits(fw.frame()) }
func (l *link) requestLoad() *atomic.Int64      { return nil }
func (l *link) owesReceipts() bool              { return false }

// put queues the shared frame: a link's writer batches frames into NATS
// messages, and its frames are not paced by the queue's mark but by the
// receiver's credit (cluster_credit.go).
func (l *link) put(h *held, fw *forward, deadline time.Time, _ bool) (int, bool) {
	f := fw.frame()
	return len(f.B), h.enqueue(&l.endpoint, f, deadline, false)
}

// putStream queues a stream message, waiting for the receiver's credit
// while the link progresses (enqueueLinkStream).
func (l *link) putStream(fw *forward, deadline time.Time, h *held) (int, DropReason, bool) {
	if n, ok := l.put(h, fw, deadline, true); ok {
		return n, 0, true
	}
	f := fw.frame()
	r, ok := l.enqueueLinkStream(f, deadline, h)
	return len(f.B), r, ok
}

// link returns the link to broker name, opening it when there is none.
// A link that is open is found without a lock (linkSnap): every stream
// message for another broker's subscribers asks, and lmu taken per
// message was a seventh of the sending broker's routing of a stream.
func (cl *cluster) link(name string) *link {
	if m := cl.linkSnap.Load(); m != nil {
		if l := (*m)[name]; l != nil && !l.out.Closing() {
			return l
		}
	}
	cl.lmu.Lock()
	defer cl.lmu.Unlock()
	if l := cl.links[name]; l != nil && !l.out.Closing() {
		return l
	}
	if cl.closed {
		return nil
	}
	nc := &linkConn{cl: cl, subject: cl.linkSubject(name, cl.b.opts.Name), epoch: newEpoch(), granted: make(chan struct{}, 1), closed: make(chan struct{})}
	nc.limit.Store(linkInitialCredit)
	b := cl.b
	l := &link{cl: cl, endpoint: endpoint{b: b, nc: nc, node: name, addr: name + ".bus", out: sendq.New(nc, sendq.Limits{
		MaxBytes: b.opts.MaxQueueBytes, MaxMessages: b.opts.MaxQueueMessages, WriteTimeout: b.opts.WriteTimeout,
	})}}
	if old := cl.links[name]; old != nil {
		b.traffic.retire(&old.meter) // under lmu, as it leaves the map: Traffic never counts it twice
	}
	cl.links[name] = l
	cl.snapLinksLocked()
	cl.linkWG.Add(2)
	go func() {
		defer cl.linkWG.Done()
		l.writeLoop()
	}()
	go func() {
		defer cl.linkWG.Done()
		<-l.out.Done()
		cl.lmu.Lock()
		if cl.links[name] == l {
			delete(cl.links, name)
			cl.snapLinksLocked()
			b.traffic.retire(&l.meter)
		}
		cl.lmu.Unlock()
		b.dropPending(l) // calls waiting on that broker fail: DISCONNECT
	}()
	return l
}

// snapLinksLocked publishes a copy of links for link's lock-free reads;
// lmu is held.
func (cl *cluster) snapLinksLocked() {
	m := maps.Clone(cl.links)
	cl.linkSnap.Store(&m)
}

// closeLink closes the link to a broker that left or went silent.
func (cl *cluster) closeLink(name string) {
	cl.lmu.Lock()
	l := cl.links[name]
	cl.lmu.Unlock()
	if l != nil {
		l.close(wire.ResultDisconnect)
	}
	cl.relayPeerGone(name) // and the relay's commands and sessions with it
}

// closeLinks closes every link and waits for their goroutines (leave).
func (cl *cluster) closeLinks() {
	cl.lmu.Lock()
	cl.closed = true
	for _, l := range cl.links {
		l.close(wire.ResultShutdown)
	}
	cl.lmu.Unlock()
	cl.linkWG.Wait()
}

// onLink takes a message another broker sent this one (NATS's goroutine
// for the subscription, the links' only reader): a header
// (cluster_credit.go), then a batch of length-prefixed frames, as on a
// socket. The frames are routed as a node's reader routes one read's
// (readLoop): their destinations are flushed once, after the batch, so
// an idle node's connection is written in place by this goroutine rather
// than by its writer, woken per frame. Then the sender is granted room
// for more.
func (cl *cluster) onLink(m *nats.Msg) {
	from := sender(m)
	if from == cl.b.opts.Name {
		return
	}
	epoch, off, seq, data, ok := linkHeader(m.Data)
	if !ok {
		cl.b.stats.drop(DropPeerRefused)
		return
	}
	l := cl.link(from)
	if l == nil {
		return // leaving
	}
	l.readAt.Store(0) // this message's frames arrived now: their ttls count from here (conn.now)
	in, fresh := cl.received(from, epoch, off, seq)
	n := 0
	cl.verdict.reset()
	for len(data) > 0 {
		if len(data) < 4 || len(data)-4 < int(binary.BigEndian.Uint32(data)) {
			cl.b.stats.drop(DropPeerRefused) // cut short: nothing after it can be trusted
			break
		}
		n0 := 4 + int(binary.BigEndian.Uint32(data))
		cl.take(l, from, data[4:n0])
		data = data[n0:]
		n++
	}
	cl.held.flush()
	cl.taken(from, in, off, seq, n, len(m.Data), fresh)
}

// take routes one frame from broker from's link l.
func (cl *cluster) take(l *link, from string, frame []byte) {
	v := &cl.view
	if err := hotpath.ParseView(frame, v); err != nil {
		cl.b.stats.drop(DropPeerRefused)
		return
	}
	cmd := v.Value(wire.HeaderCommand)
	if strings.HasPrefix(cmd, wire.ControlPrefix) && cmd != wire.CmdReceipt && cmd != wire.CmdPublished {
		cl.b.stats.drop(DropPeerRefused) // a peer answers with receipts and publication results; it commands nothing
		return
	}
	if !cl.verdict.allowed(cl, from, v.Value(wire.HeaderFrom)) {
		cl.b.stats.drop(DropPeerRefused)
		cl.b.log.Warn("bus: dropped a frame a broker sent in another's name", "broker", from, "from", clip(v.Value(wire.HeaderFrom)))
		return
	}
	cl.b.dispatchLink(l, v, &cl.held) // parsed once: above; flushed by onLink
}

// fromVerdict keeps fromAllowed's last verdict within one link message:
// a batch's frames mostly come from one node, and the directory lookups
// behind a verdict were a tenth of the receiving broker's CPU at full
// speed. The address is copied: a View's strings may alias a buffer the
// next frame's parse reuses. Owned by onLink.
type fromVerdict struct {
	addr     []byte
	ok, have bool
}

func (f *fromVerdict) reset() { f.have = false }

// allowed is cl.fromAllowed(origin, addr), reusing the batch's last
// verdict for the same address.
func (f *fromVerdict) allowed(cl *cluster, origin, addr string) bool {
	if !f.have || string(f.addr) != addr {
		f.addr, f.ok, f.have = append(f.addr[:0], addr...), cl.fromAllowed(origin, addr), true
	}
	return f.ok
}

// fromAllowed reports whether broker origin may send a frame from addr:
// the broker itself or a node that is neither this broker's nor listed on
// a third broker. A node the directory does not know yet is allowed: its
// broker's snapshot may be behind its first message.
func (cl *cluster) fromAllowed(origin, addr string) bool {
	node := strings.TrimSuffix(addr, ".bus")
	if node == origin {
		return true
	}
	if node == cl.b.opts.Name || cl.b.dir.lookup(node) != nil {
		return false
	}
	n, ok := cl.remoteNode(node)
	return !ok || n.Broker == origin
}

// linkConn is a link's "socket": each batch the writer writes becomes
// NATS messages of as many whole length-prefixed frames as fit NATS's
// max_payload, so a busy link costs one NATS message per batch, not per
// frame, paced by the receiver's credit. Reading is NATS's subscription
// (onLink), so Read only waits for Close.
type linkConn struct {
	cl      *cluster
	subject string
	epoch   uint64 // set at creation (cluster_credit.go)

	// Owned by the writer: the start of a frame a batch split, the bytes
	// and frames published in this epoch, and the message being built.
	pending   []byte
	sent, seq uint64
	msg       []byte

	limit    atomic.Uint64 // the receiver's last grant: sent may grow while below it
	hadGrant atomic.Bool   // a grant for this epoch came
	granted  chan struct{} // 1 slot: limit grew
	deadline atomic.Int64  // unix nanoseconds of the write deadline; 0: none

	once   sync.Once
	closed chan struct{}
}

// Write publishes every complete frame in p, as NATS messages of as many
// whole frames as fit max_payload, each once the receiver granted room
// for it (cluster_credit.go). NATS buffers what it cannot send while it
// reconnects; a link does not: it fails at once, so the calls on it fail
// (DISCONNECT) instead of arriving late with a stale ttl.
func (l *linkConn) Write(p []byte) (int, error) {
	select {
	case <-l.closed:
		return 0, errLinkClosed
	default:
	}
	nc := l.cl.nc
	if !nc.IsConnected() {
		return 0, errLinkDown
	}
	buf := p
	if len(l.pending) > 0 {
		l.pending = append(l.pending, p...)
		buf = l.pending
	}
	limit := l.cl.maxPayload() - linkHeaderLen
	msg, end, n := 0, 0, 0 // buf[msg:end] is the message being gathered, of n frames
	send := func() error {
		if err := l.awaitCredit(); err != nil {
			return err
		}
		return l.publish(buf[msg:end], n)
	}
	for len(buf)-end >= 4 {
		size := 4 + int(binary.BigEndian.Uint32(buf[end:]))
		if len(buf)-end < size {
			break // the rest of it comes with the next write
		}
		if end+size-msg > limit && end > msg { // full: send what is gathered
			if err := send(); err != nil {
				return 0, err
			}
			msg, n = end, 0
		}
		end += size
		n++
		if size > limit {
			// Routing checks the size (frameFits); were one too large,
			// NATS would refuse it and the link with it: it is dropped.
			msg, n = end, 0
		}
	}
	if end > msg {
		if err := send(); err != nil {
			return 0, err
		}
	}
	l.pending = append(l.pending[:0], buf[end:]...)
	return len(p), nil
}

var (
	errLinkDown   = &net.OpError{Op: "write", Net: "nats", Err: os.ErrClosed}
	errLinkClosed = net.ErrClosed
)

func (l *linkConn) Read([]byte) (int, error) {
	<-l.closed
	return 0, net.ErrClosed
}

func (l *linkConn) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *linkConn) LocalAddr() net.Addr             { return linkAddr(l.subject) }
func (l *linkConn) RemoteAddr() net.Addr            { return linkAddr(l.subject) }
func (l *linkConn) SetDeadline(t time.Time) error   { return l.SetWriteDeadline(t) }
func (l *linkConn) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline bounds the wait for credit: a receiver that grants
// none until then makes the link's writer fail as a slow consumer's.
func (l *linkConn) SetWriteDeadline(t time.Time) error {
	var d int64
	if !t.IsZero() {
		d = t.UnixNano()
	}
	l.deadline.Store(d)
	return nil
}

type linkAddr string

func (a linkAddr) Network() string { return "nats" }
func (a linkAddr) String() string  { return "nats:" + string(a) }

// frameFits reports whether a frame can cross to another broker: NATS
// refuses a message over its max_payload, and a link message carries its
// header too.
func (cl *cluster) frameFits(f *sendq.Frame) bool {
	return len(f.B)+linkHeaderLen <= cl.maxPayload() // its length prefix crosses too
}
