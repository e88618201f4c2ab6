package relay

import (
	"context"
	"fmt"
	"time"
)

// Blob is one blob of an inbox, as a session delivers it.
type Blob struct {
	Seq    Seq       // what Ack takes
	Data   []byte    // the bytes pushed; the caller's own copy
	Pushed time.Time // when the store took it (its TTL runs from here)
}

// Session is one receive session of one device: it yields the device's
// inbox in arrival order, each blob once. A new session starts again from
// the oldest blob not acked, so a blob delivered and not acked is sent
// again only on a new session. A Session is cheap (nothing to close) and
// its methods may be called from several goroutines; each blob still goes
// out once.
type Session struct {
	s      *Store
	device string
	after  Seq // guarded by Store.mu: the last seq this session delivered
}

// Session starts a receive session for device. The error is ErrMalformed
// for a device id that is not one, ErrClosed once Close has begun.
func (s *Store) Session(device string) (*Session, error) {
	if !validDevice(device) {
		return nil, ErrMalformed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, ErrClosed
	}
	return &Session{s: s, device: device}, nil
}

// Delivered returns the sequence of the last blob the session delivered
// (0: none yet). Every blob it delivered has a sequence at most this.
func (ss *Session) Delivered() Seq {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	return ss.after
}

// Next returns the session's next blob, waiting for a push if the inbox
// holds none it has not delivered. It returns ctx.Err() when ctx ends
// first and ErrClosed once the store is closing. A blob past its TTL is
// deleted instead of delivered; one whose record fails its check (disk
// damage) is dropped, counted (Stats.Damaged) and logged.
func (ss *Session) Next(ctx context.Context) (Blob, error) {
	s := ss.s
	s.mu.Lock()
	for {
		if s.closing {
			s.mu.Unlock()
			return Blob{}, ErrClosed
		}
		ib := s.inboxes[ss.device]
		if ib == nil {
			ib = newInbox(ss.device, s.opts.Now().UnixNano(), s.opts.PushBurst)
			s.inboxes[ss.device] = ib
		}
		if b, ok := s.nextLocked(ss, ib); ok {
			s.mu.Unlock()
			return b, nil
		}
		if ib.wake == nil {
			ib.wake = make(chan struct{})
		}
		wake := ib.wake
		ib.waiters++
		s.mu.Unlock()
		var err error
		select {
		case <-wake:
		case <-s.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.mu.Lock()
		ib.waiters--
		if err != nil {
			s.mu.Unlock()
			return Blob{}, err
		}
	}
}

// nextLocked finds and reads the session's next deliverable blob.
func (s *Store) nextLocked(ss *Session, ib *inbox) (Blob, bool) {
	defer ib.tidy()
	now := s.opts.Now().UnixNano()
	ttl := s.opts.TTL.Nanoseconds()
	for i := ib.after(ss.after); i < len(ib.entries); i++ {
		e := ib.entries[i]
		if e.dead {
			continue
		}
		if e.pushed+ttl <= now {
			s.deleteLocked(ss.device, ib, i)
			s.counts.expired++
			s.kick()
			continue
		}
		data := e.data
		var err error
		if data != nil {
			// Kept since its push: the session takes the store's copy
			// (a blob goes out once per session; a later session reads
			// it from disk).
			s.uncacheLocked(&ib.entries[i])
		} else {
			data, err = s.readLocked(ss.device, e)
		}
		if err != nil {
			s.dropLocked(ss.device, ib, i)
			s.counts.damaged++
			s.log.Error("relay store: a blob's record fails its check; it is dropped", "file", e.seg.path, "offset", e.off, "seq", uint64(e.seq), "err", err)
			continue
		}
		ss.after = e.seq
		return Blob{Seq: e.seq, Data: data, Pushed: time.Unix(0, e.pushed)}, true
	}
	return Blob{}, false
}

// readLocked reads e's record and returns its blob after checking that the
// record is whole and is e's.
func (s *Store) readLocked(device string, e entry) ([]byte, error) {
	raw := make([]byte, pushRecordSize(len(device), int(e.size)))
	if _, err := e.seg.f.ReadAt(raw, e.off); err != nil {
		return nil, err
	}
	r, _, err := decodeRecord(raw)
	switch {
	case err != nil:
		return nil, err
	case r.kind != kindPush || r.seq != e.seq || string(r.device) != device || int(e.size) != len(r.blob):
		return nil, fmt.Errorf("the record there is not seq %d of this device", e.seq)
	}
	return r.blob, nil
}
