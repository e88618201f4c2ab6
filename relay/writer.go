package relay

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"time"
)

// The writer goroutine owns the log's files: it alone writes, syncs,
// rotates and deletes segments. Each round is one group commit: it takes
// every push and delete queued since the last round, appends their records
// to the active segment in one write, syncs once, then applies the pushes
// to the inboxes and completes their Push calls. While one round syncs,
// the next fills; nothing waits on a timer.

// maxKeptBuffer is the largest commit buffer the writer keeps for the next
// commit.
const maxKeptBuffer = 4 << 20

// writerState is owned by the writer.
type writerState struct {
	buf        []byte   // the commit's records
	offs       []int64  // where each push's record goes
	compactSeg *segment // the segment being copied forward
	compactOff int64    // where in it the copying has got to
	seqs       []Seq    // the commit's pushes, for hooks.sync

	endsWithMark bool // the active segment's last record is a mark (set by Open, then by the writer)
}

// copyOp is a live record copied forward from the oldest segment.
type copyOp struct {
	ib      *inbox
	seq     Seq
	from    *segment
	fromOff int64
	toOff   int64 // in the active segment
	size    int64 // record bytes
}

func (s *Store) writeLoop() {
	defer s.writer.Done()
	retry := time.NewTimer(s.opts.RetryInterval)
	defer retry.Stop()
	retrying := true // the timer is running
	for {
		s.mu.Lock()
		failed := s.failed != nil
		s.mu.Unlock()
		switch {
		case failed && !retrying:
			retry.Reset(s.opts.RetryInterval)
			retrying = true
		case !failed && retrying:
			retry.Stop()
			retrying = false
		}
		var retryC <-chan time.Time
		if retrying {
			retryC = retry.C
		}
		select {
		case <-s.signal:
			s.commit(true)
		case <-retryC:
			retrying = false
			s.writeAgain()
		case <-s.stopWriter:
			s.commit(false) // what was admitted before Close
			s.closeMark()
			return
		}
	}
}

// writeAgain tries to get the log back to a known state after a failed
// write or fsync, so that the store takes pushes again once the disk has
// room: it cuts the active segment back to what was synced before the
// failure (the failed commit's pushes were refused, never acknowledged),
// appends a mark and syncs. Only when all of it succeeds is the failure
// cleared; otherwise the next try is RetryInterval later.
func (s *Store) writeAgain() {
	s.mu.Lock()
	active, nextSeq, cause := s.segs[len(s.segs)-1], s.nextSeq, s.failed
	s.mu.Unlock()
	mark := appendMark(nil, nextSeq, active.size)
	err := active.f.Truncate(active.size)
	if err == nil {
		_, err = active.f.WriteAt(mark, active.size)
	}
	if err == nil {
		err = s.syncHooked(active.f)
	}
	if err != nil {
		s.log.Debug("relay store: still cannot write", "file", active.path, "err", err)
		return
	}
	s.mu.Lock()
	active.size += int64(len(mark))
	s.counts.diskBytes += int64(len(mark))
	s.failed = nil
	s.mu.Unlock()
	s.writerWS.endsWithMark = true
	s.log.Info("relay store: writing again after a failure", "file", active.path, "failure", cause)
}

// syncHooked is syncData, through hooks.sync when a test set it.
func (s *Store) syncHooked(f *os.File) error {
	if h := s.opts.hooks; h != nil && h.sync != nil {
		return h.sync(f, nil)
	}
	return syncData(f)
}

// commit runs one group commit; reclaim allows copying forward and
// deleting old segments in the same round.
func (s *Store) commit(reclaim bool) {
	if h := s.opts.hooks; h != nil && h.beforeWrite != nil {
		h.beforeWrite()
	}
	w := &s.writerWS
	s.mu.Lock()
	b := s.pending
	if len(b.pushes) > 0 || len(b.deletes) > 0 || b.barrier {
		s.pending = newBatch()
	} else {
		b = &batch{done: make(chan struct{})} // s.pending stays: its done is for the pushes still to come
	}
	failed := s.failed
	active := s.segs[len(s.segs)-1]
	compact := reclaim && s.compactNeededLocked()
	nextSeq := s.nextSeq
	s.mu.Unlock()

	if failed != nil {
		s.abort(b)
		return
	}
	if len(b.pushes) == 0 && len(b.deletes) == 0 && !compact {
		close(b.done)
		if reclaim {
			s.reclaim()
		}
		return
	}
	if active.size >= s.opts.SegmentBytes {
		seg, err := createSegment(s.dir, active.num+1, nextSeq)
		if err != nil {
			s.fail(fmt.Errorf("creating segment %d: %w", active.num+1, err), b)
			return
		}
		s.mu.Lock()
		s.segs = append(s.segs, seg)
		s.counts.diskBytes += seg.size
		s.mu.Unlock()
		active = seg
	}

	// The mark first: everything before it is synced (the last commit's
	// fsync returned), and every seq below nextSeq is assigned.
	buf, offs := appendMark(w.buf[:0], nextSeq, active.size), w.offs[:0]
	for _, p := range b.pushes {
		offs = append(offs, active.size+int64(len(buf)))
		buf = appendPush(buf, p.seq, p.pushed, p.device, p.blob)
	}
	for _, d := range b.deletes {
		buf = appendDelete(buf, d.seq, d.device)
	}
	var copies []copyOp
	if compact {
		var err error
		if buf, copies, err = s.copyForward(buf, active); err != nil {
			s.fail(fmt.Errorf("reading segment %d to copy it forward: %w", s.segs[0].num, err), b)
			return
		}
	}
	if len(buf) == markSize {
		buf = buf[:0] // nothing to commit after all (nothing left to copy)
	}
	w.buf, w.offs = buf, offs
	if cap(buf) > maxKeptBuffer {
		w.buf = nil // a burst of large blobs does not pin its buffer
	}

	if len(buf) > 0 {
		if _, err := active.f.WriteAt(buf, active.size); err != nil {
			s.fail(fmt.Errorf("writing %s: %w", active.path, err), b)
			return
		}
		if err := s.sync(active.f, b); err != nil {
			s.fail(fmt.Errorf("syncing %s: %w", active.path, err), b)
			return
		}
		w.endsWithMark = false
	}

	s.mu.Lock()
	active.size += int64(len(buf))
	s.counts.diskBytes += int64(len(buf))
	for i, p := range b.pushes {
		rec := pushRecordSize(len(p.device), len(p.blob))
		p.ib.pendingBlobs--
		p.ib.pendingBytes -= int64(len(p.blob))
		s.pendingBytes -= int64(len(p.blob))
		u := &s.classes[p.ib.class]
		u.pendingBytes -= int64(len(p.blob))
		u.bytes += int64(len(p.blob))
		if p.ib.blobs == 0 {
			s.counts.inboxes++
			s.pendingOnly-- // it held nothing but pushes in flight, this one among them
			u.inboxes++
			u.pendingOnly--
		}
		var keep []byte // the push's copy, handed to the first session that delivers it
		if s.cached+int64(len(p.blob)) <= s.opts.CacheBytes {
			keep = p.blob
			s.cached += int64(len(p.blob))
		}
		p.ib.add(entry{seq: p.seq, pushed: p.pushed, seg: active, off: offs[i], size: int32(len(p.blob)), data: keep})
		active.live++
		active.liveBytes += rec
		s.counts.liveBytes += rec
		s.counts.blobs++
		s.counts.bytes += int64(len(p.blob))
	}
	for _, c := range copies {
		i := c.ib.find(c.seq)
		if i < 0 || c.ib.entries[i].seg != c.from || c.ib.entries[i].off != c.fromOff {
			continue // acked or expired meanwhile: the copy is dead on arrival
		}
		c.ib.entries[i].seg, c.ib.entries[i].off = active, c.toOff
		c.from.live--
		c.from.liveBytes -= c.size
		active.live++
		active.liveBytes += c.size
		s.counts.copied += c.size
	}
	if len(buf) > 0 {
		s.counts.fsyncs++
	}
	s.counts.pushes += uint64(len(b.pushes))
	s.mu.Unlock()
	close(b.done)
	for _, p := range b.pushes {
		if p.then != nil {
			p.then(p.seq, nil)
		}
	}

	if reclaim {
		freed := s.reclaim()
		s.mu.Lock()
		more := s.compactNeededLocked()
		s.mu.Unlock()
		midPass := w.compactSeg != nil && w.compactOff < w.compactSeg.size
		if more && (len(copies) > 0 || freed > 0 || midPass) {
			s.kick() // go on reclaiming, between the pushes that come; a pass that found nothing waits for the next push or sweep
		}
	}
}

// closeMark ends the log with a mark when the store closes, so that after
// a clean close no record can be taken for a torn write: damage anywhere
// refuses to open.
func (s *Store) closeMark() {
	w := &s.writerWS
	s.mu.Lock()
	failed, active, nextSeq := s.failed, s.segs[len(s.segs)-1], s.nextSeq
	s.mu.Unlock()
	if failed != nil || w.endsWithMark {
		return
	}
	buf := appendMark(nil, nextSeq, active.size)
	err := func() error {
		if _, err := active.f.WriteAt(buf, active.size); err != nil {
			return err
		}
		return syncData(active.f)
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed = fmt.Errorf("writing the closing mark to %s: %w", active.path, err)
		s.log.Error("relay store: writing the log failed", "dir", s.dir, "err", s.failed)
		return
	}
	active.size += int64(len(buf))
	s.counts.diskBytes += int64(len(buf))
	w.endsWithMark = true
}

// flush returns once everything queued before it (acks included) is
// synced. Ack does not wait; tests that need the log in a known order do.
func (s *Store) flush() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	b := s.pending
	b.barrier = true
	s.mu.Unlock()
	s.kick()
	<-b.done
	return b.err
}

// sync makes the commit durable, through hooks.sync when a test set it.
func (s *Store) sync(f *os.File, b *batch) error {
	h := s.opts.hooks
	if h == nil || h.sync == nil {
		return syncData(f)
	}
	w := &s.writerWS
	w.seqs = w.seqs[:0]
	for _, p := range b.pushes {
		w.seqs = append(w.seqs, p.seq)
	}
	return h.sync(f, w.seqs)
}

// fail stops the store's writing: after a failed write or fsync the
// log's state on disk is unknown. b and every later push are refused
// Internal until the writer gets the log back to a known state
// (writeAgain, every RetryInterval); the cause goes to the log.
func (s *Store) fail(err error, b *batch) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
		s.log.Error("relay store: writing the log failed; every push is refused until it writes again", "dir", s.dir, "err", err, "retry_every", s.opts.RetryInterval)
	}
	s.mu.Unlock()
	s.abort(b)
}

// abort refuses every push of b and gives back what they reserved.
func (s *Store) abort(b *batch) {
	s.mu.Lock()
	for _, p := range b.pushes {
		p.ib.pendingBlobs--
		p.ib.pendingBytes -= int64(len(p.blob))
		s.pendingBytes -= int64(len(p.blob))
		u := &s.classes[p.ib.class]
		u.pendingBytes -= int64(len(p.blob))
		if p.ib.pendingBlobs == 0 && p.ib.blobs == 0 {
			s.pendingOnly--
			u.pendingOnly--
		}
	}
	s.mu.Unlock()
	b.err = s.refuse(ErrInternal)
	close(b.done)
	for _, p := range b.pushes {
		if p.then != nil {
			p.then(0, b.err)
		}
	}
}

// compactNeededLocked: the oldest segment is done with (nothing live), or
// the log holds more dead bytes than live ones and more than a segment, so
// the oldest segment's live records are to be copied forward.
func (s *Store) compactNeededLocked() bool {
	if len(s.segs) < 2 {
		return false
	}
	dead := s.counts.diskBytes - s.counts.liveBytes
	return s.segs[0].live == 0 || dead > s.counts.liveBytes && dead > s.opts.SegmentBytes
}

// copyForward appends to buf up to compactChunk bytes' worth of the
// oldest segment's live records, as they are (same seq, time, device and
// blob), and says where each will be in the active segment.
func (s *Store) copyForward(buf []byte, active *segment) ([]byte, []copyOp, error) {
	w := &s.writerWS
	s.mu.Lock()
	oldest := s.segs[0]
	end := oldest.size
	live := oldest.live
	s.mu.Unlock()
	if live == 0 {
		return buf, nil, nil // reclaim deletes it
	}
	if w.compactSeg != oldest || w.compactOff >= end {
		w.compactSeg, w.compactOff = oldest, segHeaderSize
	}
	type found struct {
		device string
		seq    Seq
		off    int64
		raw    []byte
	}
	var recs []found
	br := bufio.NewReaderSize(io.NewSectionReader(oldest.f, w.compactOff, end-w.compactOff), 64<<10)
	read := int64(0)
	for read < compactChunk {
		r, raw, err := readRecord(br, nil)
		if err == io.EOF {
			break
		}
		if err != nil {
			return buf, nil, err // the segment was whole when it was scanned
		}
		if r.kind == kindPush {
			recs = append(recs, found{string(r.device), r.seq, w.compactOff + read, raw})
		}
		read += int64(len(raw))
	}
	var copies []copyOp
	s.mu.Lock()
	for _, f := range recs {
		ib := s.inboxes[f.device]
		if ib == nil {
			continue
		}
		i := ib.find(f.seq)
		if i < 0 || ib.entries[i].seg != oldest || ib.entries[i].off != f.off {
			continue
		}
		copies = append(copies, copyOp{ib: ib, seq: f.seq, from: oldest, fromOff: f.off, toOff: active.size + int64(len(buf)), size: int64(len(f.raw))})
		buf = append(buf, f.raw...)
	}
	s.mu.Unlock()
	w.compactOff += read
	return buf, copies, nil
}

// reclaim deletes the oldest segments while nothing in them is live (the
// active one stays). Deleting only the oldest keeps every delete record
// that still matters: a delete is never in an older segment than the push
// it deletes. The directory is synced after each removal, so removals
// are durable in order.
func (s *Store) reclaim() (freed int) {
	for ; ; freed++ {
		s.mu.Lock()
		if len(s.segs) < 2 || s.segs[0].live > 0 {
			s.mu.Unlock()
			return freed
		}
		seg := s.segs[0]
		s.segs = s.segs[1:]
		s.counts.diskBytes -= seg.size
		s.mu.Unlock()
		seg.f.Close()
		if err := os.Remove(seg.path); err != nil {
			s.log.Error("relay store: deleting a segment nothing needs", "file", seg.path, "err", err)
			return freed
		}
		if err := syncDir(s.dir); err != nil {
			s.log.Error("relay store: syncing the directory after deleting a segment", "dir", s.dir, "err", err)
			return freed
		}
	}
}
