package relay

import "time"

// The sweeper deletes blobs past their TTL (nobody is told) and forgets
// idle inboxes, every SweepInterval. It is started by Open and joined by
// Close.

func (s *Store) sweepLoop() {
	defer s.sweeper.Done()
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sweep()
		case <-s.stopSweep:
			return
		}
	}
}

// sweep runs once: it deletes, in every inbox, the expired blobs at its
// head (blobs arrive in time order, so the scan stops at the first one
// still valid; one pushed under a clock that went back is caught by Next
// instead), forgets idle inboxes, and wakes the writer to write the
// deletes and reclaim space.
func (s *Store) sweep() {
	s.mu.Lock()
	now := s.opts.Now().UnixNano()
	ttl := s.opts.TTL.Nanoseconds()
	for device, ib := range s.inboxes {
		for i := ib.head; i < len(ib.entries); i++ {
			e := &ib.entries[i]
			if e.dead {
				continue
			}
			if e.pushed+ttl > now {
				break
			}
			s.deleteLocked(device, ib, i)
			s.counts.expired++
		}
		ib.tidy()
		if ib.idle(now, s.opts.MaxPushRate, s.opts.PushBurst) {
			delete(s.inboxes, device)
		}
	}
	s.mu.Unlock()
	s.kick()
}
