package trueseal

import (
	"net"
	"sync"
	"time"

	"github.com/flynn/noise"

	"busbar/relay"
)

// A push session (Noise NK: the relay proves its key, the sender stays
// anonymous). The reader admits each Push to the store without waiting
// (Pusher.PushAsync), so a session's pushes share group commits; the
// writer answers them in push order, Ack once the fsync that covers the
// push has returned, Error for a permanent refusal (the session goes on).
// A temporary refusal (inbox full, rate limited, store closing or
// failing) has no frame in trueseal's protocol: the writer closes the
// session, and the client, never acked, keeps the blob queued and pushes
// it again on its next session; the reader admits no push after one
// refused for now, so none is stored ahead of it. Frames other than Push
// are dropped.

// pushSession runs a push session until the peer leaves, a write fails or
// the server closes.
func (s *Server) pushSession(c net.Conn, cs ciphers) {
	s.pushN.Add(1)
	defer s.pushN.Add(-1)
	_ = c.SetDeadline(time.Time{})
	n := s.opts.MaxPushesInFlight
	answers := make(chan chan error, n) // in push order; never full: room bounds it
	room := make(chan struct{}, n)      // one token per push not yet answered
	done := make(chan struct{})         // closed when the writer returns
	var w sync.WaitGroup
	w.Go(func() { s.answerPushes(c, cs.send, answers, room, done) })
	s.readPushes(c, cs.recv, answers, room, done)
	close(answers)
	w.Wait()
}

func (s *Server) readPushes(c net.Conn, recv *noise.CipherState, answers chan<- chan error, room chan struct{}, done <-chan struct{}) {
	var buf []byte
	s.mu.Lock() // sessions start under mu (track): a test's pushAsync set under it is seen
	push := s.pushAsync
	s.mu.Unlock()
	if push == nil {
		push = s.inboxes.Pusher().PushAsync
	}
	for {
		select {
		case room <- struct{}{}: // wait for room before reading the next push
		case <-done:
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
		msg, err := readMessage(c, buf)
		if err != nil {
			return
		}
		buf = msg
		plain, err := recv.Decrypt(nil, nil, msg) // a fresh buffer: the envelope becomes the store's
		if err != nil {
			return // the two sides' nonces no longer agree: nothing more can be read
		}
		typ, body, err := ParseFrame(plain)
		if typ != Push {
			<-room
			continue
		}
		ans := make(chan error, 1) // the store's callback never blocks
		if err != nil {
			ans <- relay.ErrMalformed
		} else if key, env, err := ParsePush(body); err != nil {
			ans <- relay.ErrMalformed
		} else if err := push(DeviceID(key), env, func(_ relay.Seq, err error) { ans <- err }); err != nil {
			ans <- err
			if code, ok := relay.RefusalCode(err); !ok || code.Temporary() {
				// The writer closes the session at this answer; a push
				// read after it must not be stored ahead of this one,
				// which the client pushes again.
				answers <- ans
				return
			}
		}
		answers <- ans
	}
}

func (s *Server) answerPushes(c net.Conn, send *noise.CipherState, answers <-chan chan error, room <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var frame, out []byte
	for ans := range answers {
		var err error
		select {
		case err = <-ans:
		case <-s.quit:
			c.Close()
			return
		}
		t := Ack
		if err != nil {
			s.refused.Add(1)
			if code, ok := relay.RefusalCode(err); !ok || code.Temporary() {
				c.Close() // no frame says "later": unacked, the client pushes it again
				return
			}
			t = Error
		}
		frame = AppendFrame(frame[:0], t, nil)
		ct, err := send.Encrypt(nil, nil, frame)
		if err != nil {
			c.Close()
			return
		}
		out = appendMessage(out[:0], ct)
		if t == Ack {
			s.pushed.Add(1) // counted before the client can see it
		}
		_ = c.SetWriteDeadline(time.Now().Add(s.opts.IdleTimeout))
		if _, err := c.Write(out); err != nil {
			c.Close()
			return
		}
		<-room
	}
}
