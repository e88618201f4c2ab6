package trueseal

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/flynn/noise"

	"busbar/relay"
)

// A push session (Noise NK: the relay proves its key, the sender stays
// anonymous). Each Push spends a token of its source address's bucket
// (SourcePushRate) before it reaches the store; over it, the push is
// refused for now like any temporary refusal. The reader admits each Push to the store without waiting
// (Pusher.PushAsync), so a session's pushes share group commits; the
// writer answers them in push order, Ack once the fsync that covers the
// push has returned, Error for a permanent refusal (the session goes on).
// A temporary refusal (inbox full, rate limited, store closing or
// failing) has no frame in trueseal's protocol: the writer closes the
// session, and the client, never acked, keeps the blob queued and pushes
// it again on its next session; the reader admits no push after one
// refused for now, so none is stored ahead of it. Frames other than Push,
// and a Push whose length claims more than its frame holds, are dropped
// without an answer, as trueseal-relay drops them.

// pushSession runs a push session until the peer leaves, a write fails or
// the server closes.
func (s *Server) pushSession(c net.Conn, cs ciphers, ss *session) {
	s.pushN.Add(1)
	defer s.pushN.Add(-1)
	_ = c.SetDeadline(time.Time{})
	n := s.opts.MaxPushesInFlight
	answers := make(chan chan error, n) // in push order; never full: room bounds it
	room := make(chan struct{}, n)      // one token per push not yet answered
	done := make(chan struct{})         // closed when the writer returns
	var w sync.WaitGroup
	w.Go(func() { s.answerPushes(c, ss, cs.send, answers, room, done) })
	s.readPushes(c, ss, cs.recv, answers, room, done)
	close(answers)
	w.Wait()
}

// errSourceRate is a push refused for its source address's
// SourcePushRate: RateLimited, told apart in the refusal log.
var errSourceRate = &relay.Refusal{Code: relay.RateLimited, Temporary: true}

func (s *Server) readPushes(c net.Conn, ss *session, recv *noise.CipherState, answers chan<- chan error, room chan struct{}, done <-chan struct{}) {
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
		_ = c.SetReadDeadline(s.readDeadline(ss))
		msg, err := readMessage(c, buf)
		if err != nil {
			s.readFailed(ss, err)
			return
		}
		buf = msg
		plain, err := recv.Decrypt(nil, nil, msg) // a fresh buffer: the envelope becomes the store's
		if err != nil {
			return // the two sides' nonces no longer agree: nothing more can be read
		}
		typ, body, err := ParseFrame(plain)
		if typ != Push || errors.Is(err, ErrFrameTruncated) {
			// Not a Push, or one whose length claims more than it holds:
			// dropped without an answer, as trueseal-relay drops every
			// frame it cannot parse (a truncated Push has no recipient
			// it could be answered for).
			<-room
			continue
		}
		s.markUsed(ss)
		ans := make(chan error, 1) // the store's callback never blocks
		if err != nil {
			ans <- relay.ErrMalformed
		} else if key, env, err := ParsePush(body); err != nil {
			ans <- relay.ErrMalformed
		} else if !s.sources.take(ss.host, time.Now()) {
			s.srcRate.Add(1)
			ans <- errSourceRate
			answers <- ans // the writer closes the session at it
			return
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

func (s *Server) answerPushes(c net.Conn, ss *session, send *noise.CipherState, answers <-chan chan error, room <-chan struct{}, done chan<- struct{}) {
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
			s.pushRefused(ss.host, err)
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

// pushRefused logs a refused push: its code, never its inbox or bytes.
func (s *Server) pushRefused(host string, err error) {
	if err == errSourceRate {
		s.door.Refusals.Warn("trueseal push refused: its source address is over its push rate", host,
			"rate", s.opts.SourcePushRate, "burst", s.opts.SourcePushBurst)
		return
	}
	code, ok := relay.RefusalCode(err)
	if !ok {
		code = relay.Internal
	}
	s.door.Refusals.Warn("trueseal push refused", host, "code", code.String(), "temporary", code.Temporary())
}
