package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
)

// Store is a relay's durable inbox store: one append-only log in a
// directory, an index of every device's inbox in memory, one writer
// goroutine that owns the log's files, and one sweeper.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *os.File // dir/LOCK, held until Close

	signal     chan struct{} // capacity 1: there is work for the writer
	done       chan struct{} // closed when Close begins: sessions stop waiting
	stopSweep  chan struct{} // closed by Close: the sweeper returns
	stopWriter chan struct{} // closed by Close after the sweeper is gone: the writer commits what is pending and returns
	sweeper    sync.WaitGroup
	writer     sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error // set once, by closeOnce

	refused [Internal + 1]atomic.Uint64 // refusals by code

	mu      sync.Mutex
	closing bool              // guarded by mu: Close has begun
	failed  error             // guarded by mu: the first write or sync failure; every later push is refused Internal
	inboxes map[string]*inbox // guarded by mu
	pending *batch            // guarded by mu: the next group commit, filling
	nextSeq Seq               // guarded by mu: the next sequence number to assign
	segs    []*segment        // guarded by mu (changed only by the writer): oldest first; the last is the active one
	counts  counters          // guarded by mu
	cached  int64             // guarded by mu: the bytes of blobs kept in memory until delivered (entry.data)
	// guarded by mu: pushes admitted and not yet committed, all inboxes
	// together (their bytes), and the inboxes that hold nothing but such
	// pushes: with counts they are what MaxStoreBytes and MaxInboxes bound.
	pendingBytes int64
	pendingOnly  int
	// guarded by mu: the same, and the inboxes holding a blob and their
	// bytes, per class of inbox: what each class's Budget bounds.
	classes  [classes]classUse
	budgets  [classes]Budget // set by Open
	tornCut  int64           // set by Open: bytes cut from the log's tail
	writerWS writerState     // owned by the writer
}

// counters are the store's totals, guarded by Store.mu.
type counters struct {
	inboxes   int   // inboxes holding a blob
	blobs     int   // live blobs
	bytes     int64 // their blob bytes
	liveBytes int64 // their record bytes
	diskBytes int64 // bytes in segment files
	pushes    uint64
	fsyncs    uint64
	acks      uint64
	expired   uint64
	damaged   uint64
	copied    int64
}

// batch is one group commit: what Push and Ack queued since the last one.
type batch struct {
	pushes  []pushOp
	deletes []deleteOp
	barrier bool          // flush waits on this batch: commit it even if empty
	done    chan struct{} // closed once the batch is synced or has failed
	err     error         // set before done is closed
}

type pushOp struct {
	ib     *inbox
	device string
	blob   []byte // the store's copy
	seq    Seq
	pushed int64
	then   func(Seq, error) // PushAsync's: runs on the writer once the commit is synced or failed
}

type deleteOp struct {
	device string
	seq    Seq
}

func newBatch() *batch { return &batch{done: make(chan struct{})} }

// Open opens the store in dir, creating it (mode 0700) if needed, and
// recovers its inboxes from the log: a torn tail (what a crash leaves) is
// cut; damage a crash cannot explain refuses to open (ErrDamaged). Only
// one Store may have dir open at a time.
func Open(dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		if err := syncDir(filepath.Dir(filepath.Clean(dir))); err != nil { // the new directory's own entry
			return nil, fmt.Errorf("relay: %w", err)
		}
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir: dir, opts: opts, log: opts.Logger, lock: lock,
		signal: make(chan struct{}, 1), done: make(chan struct{}),
		stopSweep: make(chan struct{}), stopWriter: make(chan struct{}),
		inboxes: map[string]*inbox{}, pending: newBatch(), nextSeq: 1,
		budgets: [classes]Budget{classOwn: opts.own(), classEdge: opts.Edge},
	}
	if err := s.recover(); err != nil {
		for _, seg := range s.segs {
			seg.f.Close()
		}
		lock.Close()
		return nil, err
	}
	s.writer.Add(1)
	go s.writeLoop()
	s.sweeper.Add(1)
	go s.sweepLoop()
	return s, nil
}

// recover reads every segment, oldest first, and rebuilds the inboxes:
// a push adds its blob (a later copy of the same seq moves it), a delete
// removes it, a blob past its TTL is left out.
func (s *Store) recover() error {
	removed, err := removeLeftovers(s.dir)
	for _, path := range removed {
		s.log.Warn("relay store: removed a segment that was being made (a crash before its header was synced)", "file", path)
	}
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	nums, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	now, ttl := s.opts.Now().UnixNano(), s.opts.TTL.Nanoseconds()
	type found struct {
		device string
		e      entry
	}
	live := map[Seq]*found{}
	devices := map[string]string{} // interned device ids
	var maxSeq Seq
	unlive := func(f *found) {
		f.e.seg.live--
		f.e.seg.liveBytes -= pushRecordSize(len(f.device), int(f.e.size))
	}
	for i, num := range nums {
		last := i == len(nums)-1
		path := filepath.Join(s.dir, segName(num))
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		seg := &segment{num: num, path: path, f: f}
		sc, err := scanSegment(f, func(r record, off int64, raw []byte) {
			if last {
				s.writerWS.endsWithMark = r.kind == kindMark
			}
			if r.kind == kindMark {
				s.nextSeq = max(s.nextSeq, r.seq)
				return
			}
			maxSeq = max(maxSeq, r.seq)
			old := live[r.seq]
			switch {
			case r.kind == kindDelete:
				if old != nil && old.device == string(r.device) {
					unlive(old)
					delete(live, r.seq)
				}
			case old != nil && old.device != string(r.device):
				// Not a copy: the checksums hold but the log contradicts
				// itself. The first push holds.
			case old != nil: // a copy made while reclaiming space: the later one holds
				unlive(old)
				old.e.seg, old.e.off = seg, off
				seg.live++
				seg.liveBytes += int64(len(raw))
			case r.pushed+ttl <= now: // expired while the store was closed
			default:
				dev, ok := devices[string(r.device)]
				if !ok {
					dev = string(r.device)
					devices[dev] = dev
				}
				live[r.seq] = &found{dev, entry{seq: r.seq, pushed: r.pushed, seg: seg, off: off, size: int32(len(r.blob))}}
				seg.live++
				seg.liveBytes += int64(len(raw))
			}
		})
		if err != nil {
			f.Close()
			return fmt.Errorf("relay: reading %s: %w", path, err)
		}
		if sc.end == 0 {
			// No whole header. A segment gets its name only once its
			// header is synced (createSegment), so no crash explains this,
			// not even in the newest segment: it may have held
			// acknowledged blobs.
			f.Close()
			return &damagedError{file: path, err: fmt.Errorf("%v (a segment is named only once its header is synced)", sc.bad)}
		}
		s.segs = append(s.segs, seg)
		if sc.header.num != num {
			return &damagedError{file: path, err: fmt.Errorf("its header says segment %d", sc.header.num)}
		}
		seg.old = sc.header.version == segVersionOld
		s.nextSeq = max(s.nextSeq, sc.header.nextSeq)
		if sc.bad != nil {
			if !last {
				return &damagedError{file: path, off: sc.end, err: sc.bad}
			}
			if err := s.checkTorn(seg, sc); err != nil {
				return err
			}
			if err := s.cutTail(seg, sc.end, sc.bad); err != nil {
				return err
			}
			s.writerWS.endsWithMark = false
		}
		seg.size = sc.end
	}
	// A push torn off with the tail was never acknowledged, but its
	// sequence number may have been seen (a session never delivers an
	// unsynced push, yet a seq is never reused all the same): skip as many
	// as the cut bytes could have held.
	minPush := pushRecordSize(1, 1)
	s.nextSeq = max(s.nextSeq, maxSeq+1) + Seq((s.tornCut+minPush-1)/minPush)
	if len(s.segs) == 0 || s.segs[len(s.segs)-1].old {
		// A new store, or one whose newest segment predates marks: the
		// log goes on in a new segment of this format.
		var num uint64 = 1
		if len(nums) > 0 {
			num = nums[len(nums)-1] + 1
		}
		seg, err := createSegment(s.dir, num, s.nextSeq)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		s.segs = append(s.segs, seg)
		s.writerWS.endsWithMark = false
	}
	for _, seg := range s.segs {
		s.counts.diskBytes += seg.size
		s.counts.liveBytes += seg.liveBytes
	}
	for _, f := range live {
		ib := s.inboxes[f.device]
		if ib == nil {
			ib = newInbox(f.device, now, s.opts.PushBurst)
			s.inboxes[f.device] = ib
		}
		ib.entries = append(ib.entries, f.e)
		ib.blobs++
		ib.bytes += int64(f.e.size)
	}
	for _, ib := range s.inboxes {
		sort.Slice(ib.entries, func(i, j int) bool { return ib.entries[i].seq < ib.entries[j].seq })
		s.counts.inboxes++
		s.counts.blobs += ib.blobs
		s.counts.bytes += ib.bytes
		u := &s.classes[ib.class]
		u.inboxes++
		u.bytes += ib.bytes
	}
	return nil
}

// checkTorn refuses damage in the newest segment that a crash cannot
// explain: bad bytes followed by a mark. Every group commit's write begins
// with a mark, and a write begins only once the one before it is synced,
// so a mark past the damage proves the damaged records were synced, and
// their pushes acknowledged. Only the last write (past the last mark) can
// be torn by a crash. A segment of the old format has no marks: there the
// first bad record is taken for a torn tail, as before.
func (s *Store) checkTorn(seg *segment, sc scanned) error {
	if seg.old {
		return nil
	}
	fi, err := seg.f.Stat()
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	at, err := markAfter(seg.f, sc.end, fi.Size())
	if err != nil {
		return fmt.Errorf("relay: reading %s: %w", seg.path, err)
	}
	if at >= 0 {
		return &damagedError{file: seg.path, off: sc.end, err: fmt.Errorf(
			"%v, and a commit mark follows at byte %d: the damage is in records that were synced and acknowledged, not a torn write", sc.bad, at)}
	}
	return nil
}

// cutTail truncates the newest segment at end, where its last whole valid
// record ends: past it is what a crash left of writes that were never
// synced, so never acknowledged.
func (s *Store) cutTail(seg *segment, end int64, why error) error {
	fi, err := seg.f.Stat()
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err := seg.f.Truncate(end); err != nil {
		return fmt.Errorf("relay: cutting the torn tail of %s: %w", seg.path, err)
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("relay: cutting the torn tail of %s: %w", seg.path, err)
	}
	s.tornCut = fi.Size() - end
	s.log.Warn("relay store: cut a torn tail from the log (a crash during a write that was never acknowledged)",
		"file", seg.path, "at", end, "bytes", s.tornCut, "reason", why.Error())
	return nil
}

// Push stores blob in device's inbox and returns its sequence number once
// the fsync that covers it has returned. The store keeps a copy: blob may
// be reused when Push returns. A refusal is a *Refusal; ctx ending before
// the fsync returns ctx.Err(), and then the blob may or may not be stored
// (like any lost ack: the sender pushes again and the recipient's dedup
// drops the copy).
func (s *Store) Push(ctx context.Context, device string, blob []byte) (Seq, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b, seq, err := s.admit(device, blob, false, nil)
	if err != nil {
		return 0, err
	}
	select {
	case <-b.done:
		if b.err != nil {
			return 0, b.err
		}
		return seq, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// PushAsync stores blob in device's inbox like Push, without waiting for
// the fsync, and without a copy: blob becomes the store's, and the caller
// must not change it after the call. A refusal at admission (every limit is checked there) is
// returned at once and then never runs; otherwise then runs once, on the
// store's writer, with the blob's sequence number when the group commit
// holding it is synced, or with a *Refusal (Internal) when that commit
// failed. Pushes admitted one after another get increasing sequence
// numbers in that order, and their then run in that order. then must not
// block nor call the Store: it runs between two group commits.
//
// It is what lets one connection keep many pushes outstanding (the
// broker's pipelined pushes) with no goroutine per push.
func (s *Store) PushAsync(device string, blob []byte, then func(Seq, error)) error {
	_, _, err := s.admit(device, blob, true, then)
	return err
}

// admit checks a push against the limits and queues it for the next group
// commit; then (if not nil) runs when that commit is done. An owned blob
// is the store's from here on; otherwise the store copies it.
func (s *Store) admit(device string, blob []byte, owned bool, then func(Seq, error)) (*batch, Seq, error) {
	switch {
	case !validDevice(device), len(blob) == 0:
		return nil, 0, s.refuse(ErrMalformed)
	case len(blob) > s.opts.MaxBlobBytes:
		return nil, 0, s.refuse(ErrTooLarge)
	}
	data := blob
	if !owned {
		data = append([]byte(nil), blob...)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, 0, s.refuse(ErrUnavailable)
	}
	if s.failed != nil {
		s.mu.Unlock()
		return nil, 0, s.refuse(ErrInternal)
	}
	now := s.opts.Now().UnixNano()
	ib := s.inboxes[device]
	if ib == nil {
		ib = newInbox(device, now, s.opts.PushBurst)
		s.inboxes[device] = ib
	}
	empty := ib.blobs+ib.pendingBlobs == 0
	u := &s.classes[ib.class]
	if u.over(&s.budgets[ib.class], ib, int64(len(data)), empty) {
		s.mu.Unlock()
		return nil, 0, s.refuse(ErrInboxFull)
	}
	if !ib.take(now, s.opts.MaxPushRate, s.opts.PushBurst) {
		s.mu.Unlock()
		return nil, 0, s.refuse(ErrRateLimited)
	}
	seq := s.nextSeq
	s.nextSeq++
	ib.pendingBlobs++
	ib.pendingBytes += int64(len(data))
	s.pendingBytes += int64(len(data))
	u.pendingBytes += int64(len(data))
	if empty {
		s.pendingOnly++
		u.pendingOnly++
	}
	b := s.pending
	b.pushes = append(b.pushes, pushOp{ib: ib, device: device, blob: data, seq: seq, pushed: now, then: then})
	s.mu.Unlock()
	s.kick()
	return b, seq, nil
}

func (s *Store) refuse(r *Refusal) *Refusal {
	s.refused[r.Code].Add(1)
	return r
}

// kick wakes the writer.
func (s *Store) kick() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// Ack deletes blob seq from device's inbox, and from no other: a seq that
// is not in this device's inbox is ErrNoSuchBlob and changes nothing.
//
// The deletion is immediate in memory (no session delivers the blob
// again) and durable with the next group commit, which the writer starts
// at once: Ack does not wait for that fsync. A crash before it returns the
// blob to the inbox, to be delivered on a later session — the only effect,
// and one the recipient's dedup absorbs.
func (s *Store) Ack(device string, seq Seq) error {
	if !validDevice(device) {
		return ErrMalformed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return ErrClosed
	}
	ib := s.inboxes[device]
	i := -1
	if ib != nil {
		i = ib.find(seq)
	}
	if i < 0 {
		return ErrNoSuchBlob
	}
	s.deleteLocked(device, ib, i)
	s.counts.acks++
	ib.tidy()
	s.kick()
	return nil
}

// AckRange deletes from device's inbox every blob whose sequence is in
// lo..hi (both included), and from no other inbox, and returns how many it
// deleted: one ack for a run of delivered blobs. Like Ack it is immediate
// in memory and durable with the next group commit.
func (s *Store) AckRange(device string, lo, hi Seq) (int, error) {
	if !validDevice(device) {
		return 0, ErrMalformed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return 0, ErrClosed
	}
	lo = max(lo, 1) // no blob has seq 0
	ib := s.inboxes[device]
	if ib == nil || lo > hi {
		return 0, nil
	}
	n := 0
	for i := ib.after(lo - 1); i < len(ib.entries) && ib.entries[i].seq <= hi; i++ {
		if !ib.entries[i].dead {
			s.deleteLocked(device, ib, i)
			n++
		}
	}
	if n > 0 {
		s.counts.acks += uint64(n)
		ib.tidy()
		s.kick()
	}
	return n, nil
}

// deleteLocked removes entry i of device's inbox and queues its delete
// record.
func (s *Store) deleteLocked(device string, ib *inbox, i int) {
	s.dropLocked(device, ib, i)
	s.pending.deletes = append(s.pending.deletes, deleteOp{device: device, seq: ib.entries[i].seq})
}

// dropLocked removes entry i from the inbox and the counts, without a
// record.
func (s *Store) dropLocked(device string, ib *inbox, i int) {
	e := &ib.entries[i]
	s.uncacheLocked(e)
	rec := pushRecordSize(len(device), int(e.size))
	e.seg.live--
	e.seg.liveBytes -= rec
	s.counts.liveBytes -= rec
	s.counts.blobs--
	s.counts.bytes -= int64(e.size)
	u := &s.classes[ib.class]
	u.bytes -= int64(e.size)
	ib.kill(i)
	if ib.blobs == 0 {
		s.counts.inboxes--
		u.inboxes--
		if ib.pendingBlobs > 0 { // it holds nothing but pushes in flight now
			s.pendingOnly++
			u.pendingOnly++
		}
	}
}

// uncacheLocked lets go of e's blob kept in memory, if any.
func (s *Store) uncacheLocked(e *entry) {
	if e.data != nil {
		s.cached -= int64(len(e.data))
		e.data = nil
	}
}

// Close stops the store: pushes are refused Unavailable, waiting sessions
// return ErrClosed, pushes already admitted are committed, and the
// writer and sweeper have returned when it returns. It is idempotent; it
// returns the write failure that stopped the store, if any.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		close(s.done)
		close(s.stopSweep)
		s.sweeper.Wait()
		close(s.stopWriter)
		s.writer.Wait()
		s.mu.Lock()
		var errs []error
		if s.failed != nil {
			errs = append(errs, fmt.Errorf("relay: the store stopped writing after a failure: %w", s.failed))
		}
		for _, seg := range s.segs {
			if err := seg.f.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.mu.Unlock()
		if err := s.lock.Close(); err != nil {
			errs = append(errs, err)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
