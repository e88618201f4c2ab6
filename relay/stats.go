package relay

import "strings"

// Stats are the store's figures.
type Stats struct {
	Inboxes int   // devices whose inbox holds a blob
	Blobs   int   // blobs in all inboxes
	Bytes   int64 // their bytes

	// Own and Edge are what busbar's own inboxes and the edge protocols'
	// hold, each against its own budget (Options.MaxStoreBytes and the
	// rest; Options.Edge).
	Own, Edge ClassStats

	Pushes         uint64  // pushes committed since Open
	Fsyncs         uint64  // group commits synced since Open
	PushesPerFsync float64 // Pushes / Fsyncs
	Acks           uint64  // blobs deleted by Ack since Open
	Expired        uint64  // blobs deleted past their TTL since Open
	Damaged        uint64  // blobs dropped since Open because their record failed its check when read

	Refused [Internal + 1]uint64 // pushes refused since Open, by Code

	Segments  int   // segment files
	DiskBytes int64 // their bytes
	LiveBytes int64 // the bytes of the records still needed
	Copied    int64 // record bytes copied forward since Open, to reclaim space
	TornBytes int64 // bytes cut from the log's tail at Open (a crash during a write)
}

// InboxStats are one device's inbox.
type InboxStats struct {
	Blobs   int   // blobs in it
	Bytes   int64 // their bytes
	Pending int   // pushes admitted, not yet synced (they count against the limits)
}

// Stats returns the store's figures. It costs the same whatever the number
// of devices; Inbox gives one device's.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.counts
	st := Stats{
		Inboxes: c.inboxes, Blobs: c.blobs, Bytes: c.bytes,
		Pushes: c.pushes, Fsyncs: c.fsyncs, Acks: c.acks, Expired: c.expired, Damaged: c.damaged,
		Segments: len(s.segs), DiskBytes: c.diskBytes, LiveBytes: c.liveBytes, Copied: c.copied, TornBytes: s.tornCut,
	}
	for i, cs := range []*ClassStats{&st.Own, &st.Edge} {
		u := &s.classes[i]
		*cs = ClassStats{Inboxes: u.inboxes, Bytes: u.bytes, Pending: u.pendingBytes}
	}
	if c.fsyncs > 0 {
		st.PushesPerFsync = float64(c.pushes) / float64(c.fsyncs)
	}
	for i := range s.refused {
		st.Refused[i] = s.refused[i].Load()
	}
	return st
}

// Inbox returns device's inbox figures.
func (s *Store) Inbox(device string) InboxStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ib := s.inboxes[device]
	if ib == nil {
		return InboxStats{}
	}
	return InboxStats{Blobs: ib.blobs, Bytes: ib.bytes, Pending: ib.pendingBlobs}
}

// Err returns the failure that stops the store from writing now (a failed
// write or fsync: every push is refused Internal until the writer manages
// to write again), or nil.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Prefix returns the figures of the inboxes whose device id starts with
// prefix, counted as Stats counts them (inboxes: those holding a blob).
// It is how /metrics tells apart the protocols that share the store
// (package trueseal's inboxes are "trueseal." ids); it walks the inboxes.
func (s *Store) Prefix(prefix string) (inboxes int, in InboxStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for dev, ib := range s.inboxes {
		if !strings.HasPrefix(dev, prefix) {
			continue
		}
		if ib.blobs > 0 {
			inboxes++
		}
		in.Blobs += ib.blobs
		in.Bytes += ib.bytes
		in.Pending += ib.pendingBlobs
	}
	return inboxes, in
}
