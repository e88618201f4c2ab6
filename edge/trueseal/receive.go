package trueseal

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"busbar/relay"
)

// A receive session (Noise XX: both sides prove their static keys; the
// device's is its inbox address). A relay.Session yields the inbox in
// arrival order, each blob once per session (Receiver: here or, on a bus,
// at the inbox's home broker); the deliverer turns each
// into a Deliver frame whose blob id is the store's sequence number, and
// the writer sends them. A DeliverAck deletes the blob from this
// device's inbox only (Receiver.Ack); an unacked blob is delivered
// again only on a new session. The writer sends a Heartbeat when nothing
// was written for HeartbeatInterval and echoes a Heartbeat the device
// starts (not the device's echo of its own); the reader closes the session
// when nothing was read for IdleTimeout. Until the device has sent a
// frame, the writer also sends a Heartbeat at half FirstFrameTimeout, so
// that a live device answers before that deadline, when a session from
// which nothing came is closed.

func (s *Server) receiveSession(c net.Conn, cs ciphers, peer []byte, ss *session) {
	s.recvN.Add(1)
	defer s.recvN.Add(-1)
	_ = c.SetDeadline(time.Time{})
	ctx, cancel := context.WithCancel(s.ctx) // Close ends the wait for an inbox's home too
	defer cancel()
	sess, err := s.inboxes.Receive(ctx, DeviceID(peer))
	if err != nil {
		return // closed: the device reconnects and tries again
	}
	defer sess.Close()
	frames := make(chan []byte, DeliverQueue)
	echo := make(chan struct{}, 1)
	var awaiting atomic.Bool // a Heartbeat of ours is not answered yet
	var w sync.WaitGroup
	w.Go(func() {
		deliverBlobs(ctx, sess, frames)
		// The session ended under the device (its inbox's home left, the
		// store closed): close the connection so the device reconnects
		// and gets, on a new session, what it did not ack.
		c.Close()
	})
	w.Go(func() { s.writeReceive(ctx, c, ss, cs.send, frames, echo, &awaiting) })
	s.readReceive(c, ss, cs.recv, sess, echo, &awaiting)
	cancel()
	c.Close()
	w.Wait()
}

// deliverBlobs turns the session's blobs into Deliver frames until ctx
// ends or the session does.
func deliverBlobs(ctx context.Context, sess Receiver, frames chan<- []byte) {
	for {
		b, err := sess.Next(ctx)
		if err != nil {
			return
		}
		body := AppendDeliverBody(make([]byte, 0, BlobIDBytes+len(b.Data)), uint64(b.Seq), b.Data)
		f := AppendFrame(make([]byte, 0, HeaderBytes+len(body)), Deliver, body)
		select {
		case frames <- f:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) writeReceive(ctx context.Context, c net.Conn, ss *session, send *noise.CipherState, frames <-chan []byte, echo <-chan struct{}, awaiting *atomic.Bool) {
	hb := AppendFrame(nil, Heartbeat, nil)
	t := time.NewTimer(s.opts.HeartbeatInterval)
	defer t.Stop()
	first := time.NewTimer(time.Until(ss.by) / 2) // the Heartbeat that asks a silent device for its first frame
	defer first.Stop()
	firstC := first.C
	var out []byte
	for {
		var f []byte
		deliver := false
		select {
		case <-ctx.Done():
			return
		case f = <-frames:
			deliver = true
		case <-echo:
			f = hb
		case <-t.C:
			awaiting.Store(true)
			f = hb
		case <-firstC:
			firstC = nil
			if ss.used.Load() {
				continue
			}
			awaiting.Store(true)
			f = hb
		}
		ct, err := send.Encrypt(nil, nil, f)
		if err != nil {
			c.Close()
			return
		}
		out = appendMessage(out[:0], ct)
		if deliver {
			s.deliv.Add(1) // counted before the device can see it
		}
		_ = c.SetWriteDeadline(time.Now().Add(s.opts.IdleTimeout))
		if _, err := c.Write(out); err != nil {
			c.Close()
			return
		}
		t.Reset(s.opts.HeartbeatInterval)
	}
}

func (s *Server) readReceive(c net.Conn, ss *session, recv *noise.CipherState, sess Receiver, echo chan<- struct{}, awaiting *atomic.Bool) {
	var buf, plain []byte
	for {
		_ = c.SetReadDeadline(s.readDeadline(ss))
		msg, err := readMessage(c, buf)
		if err != nil {
			s.readFailed(ss, err)
			return
		}
		buf = msg
		plain, err = recv.Decrypt(plain[:0], nil, msg)
		if err != nil {
			return
		}
		s.markUsed(ss)
		typ, body, err := ParseFrame(plain)
		if err != nil {
			continue
		}
		switch typ {
		case Heartbeat:
			if !awaiting.CompareAndSwap(true, false) {
				select {
				case echo <- struct{}{}:
				default: // one echo pending is as good as two
				}
			}
		case DeliverAck:
			id, rest, err := ParseBlobID(body)
			if err != nil || len(rest) != 0 {
				continue
			}
			if sess.Ack(relay.Seq(id)) == nil {
				s.dacks.Add(1)
			}
		}
	}
}
