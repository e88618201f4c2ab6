package broker

// Flow control between brokers: credit per link. NATS passes no
// back-pressure from a subscriber to a publisher, so without it a
// broker's link could publish faster than the other broker takes the
// frames in, and the backlog would grow in the receiving NATS client
// until its pending limit dropped whole batches. Instead the receiving
// broker grants the sending one room: the sender may publish while the
// bytes of frames it published on the link are below the last limit
// granted, and waits otherwise (so its link's queue fills and its
// producers stall, as behind any slow connection: route.go's
// enqueueStream). The receiver grants "up to what I have taken + my
// window" as it takes messages in, so what waits for it in NATS is about
// one window per sending broker.
//
// Every link message starts with a header of three big-endian uint64s:
// the link's epoch (random per link opened, so a restarted link or
// broker starts over), the bytes of the link messages (headers
// included; probes, which take no room, excepted) published before it in
// the epoch, and the number of frames sent before it. Counting whole messages makes the bound exact in the
// NATS client's own terms: what waits there for the receiver is at most
// its window, the one message the sender may start with any credit left,
// and the one being taken in (NATS counts it until its handler returns):
// LinkWindow + 2 × max_payload, and 24 bytes a probe. A grant, on
// <prefix>.credit.<sender>.<receiver>, is the epoch and the new limit.
// Offsets make a grant cumulative, so a lost grant is made good by the
// next one; frame numbers make a loss visible: a message whose number is
// past the one expected counts the frames between as lost
// (DropLinkLost), and so does the first message of an epoch that does
// not start at 0, unless the sender had a grant for it already (then a
// previous process of the receiver took the frames before). A sender with no credit sends, every linkProbeInterval,
// an empty message (a probe) that the receiver always answers with a
// grant: lost grants, and lost batches that would otherwise hold credit
// for ever, are repaired by it. A sender that gets no credit for the
// link's write timeout closes the link as a slow consumer: calls on it
// fail, and the next message opens a new epoch.

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/internal/sendq"
)

// Defaults and bounds of the links' flow control (docs/cluster.md#flow-control).
const (
	// DefaultClusterLinkWindow is ClusterOptions.LinkWindow's default: the
	// bytes of frames another broker may have sent this one beyond what
	// this one took in. A megabyte keeps a link at full speed across a
	// NATS round trip of up to ~20 ms at 50 MB/s.
	DefaultClusterLinkWindow = 1 << 20
	// MinClusterLinkWindow is the least LinkWindow: the credit every link
	// starts with before its first grant, which a window may not shrink.
	MinClusterLinkWindow = linkInitialCredit
	// DefaultClusterLinkPendingBytes is ClusterOptions.LinkPendingBytes'
	// default: what the NATS client keeps of the links' traffic before
	// dropping (nats.go's own default for a subscription). Paced senders
	// each keep at most LinkWindow + 2 × NATS's max_payload there.
	DefaultClusterLinkPendingBytes = 64 << 20

	linkInitialCredit = 64 << 10
	linkHeaderLen     = 24 // epoch, offset, frame number
	// linkMinMessage is the fewest bytes of a link message: its header and
	// one length-prefixed empty frame (12 bytes), rounded up; the pending
	// message limit is LinkPendingBytes / linkMinMessage, so the byte
	// limit is the one that binds.
	linkMinMessage = 32
	// linkProbeInterval is how often a sender without credit asks again.
	linkProbeInterval = 50 * time.Millisecond
	// linkGrantEvery: a receiver sends a grant once its limit moved by a
	// quarter of its window since the last one, or linkGrantAfter after
	// the last one (and at once for a new epoch or a probe), so a busy
	// link costs a grant per quarter window, and a link slowed by the
	// receiver's subscribers (each frame may wait 2 ms for room in a
	// subscriber's queue) still shows progress to its sender every few
	// milliseconds: by bytes alone, a quarter window of small frames so
	// paced took seconds, and the sender took the link for stuck.
	linkGrantEvery = 4
	linkGrantAfter = 5 * time.Millisecond
	creditLen      = 16 // epoch, limit
	// linkStall bounds a producer's wait for room in a full link's queue
	// without the link making progress, where a node's connection gets
	// streamStall (2 ms) and is taken for stuck after stuckAfter (250 ms).
	// Room on a link comes with the receiver's grants, a NATS round trip
	// apart: some 100 µs on an idle machine, but with every process of a
	// bus busy on two shared cores a grant took up to 135 ms to arrive
	// (b2's publish to b1's handler, all in one test process), and a link
	// that was paced, not stuck, lost messages with either bound.
	linkStall = 500 * time.Millisecond
	// linkGranted marks, in a link message's frame number, a sender that
	// has had a grant for its epoch: a receiver that sees an epoch for the
	// first time counts the frames before it as lost only when the mark is
	// missing (else an earlier process of the receiver took them).
	linkGranted = 1 << 63
)

// enqueueLinkStream is enqueueStream for a link to another broker, whose
// queue is full: the producer waits for room for as long as the link
// keeps making progress (a message left at least every linkStall, which
// takes a grant from the receiver), so a receiving broker that takes
// frames in more slowly than they come paces the producer instead of
// losing them. A link that made no progress for a whole linkStall is
// treated as a frozen node's connection is: the message is dropped, its
// producers are not stalled again until it progresses, and past
// linkStall without progress it is stuck (the receiver's own slow
// subscribers never stop it: it drops for them).
func (c *link) enqueueLinkStream(f *sendq.Frame, deadline time.Time, h *held) (DropReason, bool) {
	frame := func() *sendq.Frame { return f }
	for {
		if r, ok, progressed := c.stallFor(frame, deadline, linkStall, linkStall, linkStall, false, h); ok || !progressed {
			return r, ok
		}
	}
}

// linkIn is what a receiving broker knows of one sender's link; owned by
// onLink.
type linkIn struct {
	epoch   uint64
	next    uint64    // the offset after the last message taken
	seq     uint64    // the number of the next frame expected
	granted uint64    // the last limit granted
	at      time.Time // when
}

// linkHeader reads a link message's header.
func linkHeader(data []byte) (epoch, off, seq uint64, frames []byte, ok bool) {
	if len(data) < linkHeaderLen {
		return 0, 0, 0, nil, false
	}
	return binary.BigEndian.Uint64(data), binary.BigEndian.Uint64(data[8:]), binary.BigEndian.Uint64(data[16:]), data[linkHeaderLen:], true
}

// received notes a message of from's link, counting the frames NATS lost
// before it; fresh says it opens an epoch. seq is the frame number, with
// the linkGranted mark.
func (cl *cluster) received(from string, epoch, off, seq uint64) (in *linkIn, fresh bool) {
	in = cl.in[from]
	if in == nil {
		in = &linkIn{}
		cl.in[from] = in
	}

	if in.epoch != epoch {
		if seq&linkGranted == 0 && seq > 0 {
			cl.b.stats.drops[DropLinkLost].Add(int64(seq)) // the epoch's first messages
		}
		*in = linkIn{epoch: epoch, next: off, seq: seq &^ linkGranted}
		return in, true
	}
	seq &^= linkGranted
	if seq > in.seq {
		cl.b.stats.drops[DropLinkLost].Add(int64(seq - in.seq))
	}
	return in, false
}

// taken notes that a message of size bytes and n frames was taken in
// (none: a probe, which takes no room), and grants more room when it is
// due: always to a new epoch or a probe, else once the limit moved by
// 1/linkGrantEvery of the window or linkGrantAfter passed.
func (cl *cluster) taken(from string, in *linkIn, off, seq uint64, n, size int, fresh bool) {
	seq &^= linkGranted
	if n == 0 {
		size = 0 // a probe takes no room
	}
	in.next, in.seq = off+uint64(size), seq+uint64(n)
	window := uint64(cl.opts.LinkWindow)
	limit := in.next + window
	now := time.Now()
	if !fresh && n > 0 && limit < in.granted+window/linkGrantEvery && now.Sub(in.at) < linkGrantAfter {
		return
	}
	var b [creditLen]byte
	binary.BigEndian.PutUint64(b[:], in.epoch)
	binary.BigEndian.PutUint64(b[8:], limit)
	if cl.publish(cl.creditSubject(from, cl.b.opts.Name), nil, b[:]) == nil {
		in.granted, in.at = limit, now
	}
}

// creditSubject is where broker from grants broker to room on to's link.
func (cl *cluster) creditSubject(to, from string) string {
	return cl.opts.SubjectPrefix + ".credit." + to + "." + from
}

// onCredit takes a grant for this broker's link to the grant's sender.
func (cl *cluster) onCredit(m *nats.Msg) {
	if len(m.Data) != creditLen {
		cl.b.stats.drop(DropPeerRefused)
		return
	}
	cl.lmu.Lock()
	c := cl.links[sender(m)]
	cl.lmu.Unlock()
	if c == nil {
		return
	}
	l := c.nc.(*linkConn)
	if binary.BigEndian.Uint64(m.Data) != l.epoch {
		return // for a link since closed
	}
	limit := binary.BigEndian.Uint64(m.Data[8:])
	l.hadGrant.Store(true)
	for cur := l.limit.Load(); limit > cur && !l.limit.CompareAndSwap(cur, limit); cur = l.limit.Load() {
	}
	poke(l.granted)
}

// newEpoch is a new link's epoch: random, so a link opened anew, by this
// process or the next, is told from the last one.
func newEpoch() uint64 { return rand.Uint64() }

// awaitCredit waits until the link may publish, probing every
// linkProbeInterval, until the write deadline.
func (l *linkConn) awaitCredit() error {
	if l.sent < l.limit.Load() {
		return nil
	}
	probe := time.NewTicker(linkProbeInterval)
	defer probe.Stop()
	var expire <-chan time.Time
	if d := l.deadline.Load(); d != 0 {
		t := time.NewTimer(time.Until(time.Unix(0, d)))
		defer t.Stop()
		expire = t.C
	}
	for l.sent >= l.limit.Load() {
		select {
		case <-l.closed:
			return errLinkClosed
		case <-l.granted:
		case <-probe.C:
			if err := l.publish(nil, 0); err != nil {
				return err
			}
		case <-expire:
			return os.ErrDeadlineExceeded
		}
	}
	return nil
}

// publish sends n frames (frames, length-prefixed) as one link message.
func (l *linkConn) publish(frames []byte, n int) error {
	l.msg = binary.BigEndian.AppendUint64(l.msg[:0], l.epoch)
	l.msg = binary.BigEndian.AppendUint64(l.msg, l.sent)
	seq := l.seq
	if l.hadGrant.Load() {
		seq |= linkGranted
	}
	l.msg = binary.BigEndian.AppendUint64(l.msg, seq)
	l.msg = append(l.msg, frames...)
	if err := l.cl.publish(l.subject, nil, l.msg); err != nil {
		return err
	}
	if n > 0 { // a probe takes no room: it only asks
		l.sent += uint64(len(l.msg))
		l.seq += uint64(n)
	}
	if cap(l.msg) > retainLinkMsg {
		l.msg = nil
	}
	return nil
}

// retainLinkMsg bounds the scratch buffer a link keeps between messages.
const retainLinkMsg = 256 << 10
