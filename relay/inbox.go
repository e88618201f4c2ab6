package relay

import "sort"

// entry is one blob in an inbox: where its record is, and its bytes only
// until its first delivery while they fit the store's cache
// (Options.CacheBytes); otherwise a session reads them from the segment.
type entry struct {
	seq    Seq
	pushed int64    // Unix nanoseconds
	seg    *segment // the segment holding its record
	off    int64    // the record's offset in seg
	size   int32    // the blob's bytes
	dead   bool     // acked, expired or damaged; removed by tidy
	data   []byte   // the blob, kept from its push to its first delivery; nil: read it from seg
}

// inbox is one device's blobs in arrival (seq) order and its push budget.
// Guarded by Store.mu.
type inbox struct {
	entries []entry // increasing seq; dead ones stay until tidy
	head    int     // entries[:head] are dead
	dead    int     // dead entries in entries[head:]

	blobs int   // live entries
	bytes int64 // their blob bytes

	pendingBlobs int   // pushes admitted but not yet committed: they count against the limits
	pendingBytes int64 //

	class class // whose budget it counts against (classOf its device id)

	tokens   float64 // the push-rate token bucket
	refilled int64   // Unix nanoseconds of the last refill

	waiters int           // sessions waiting in Next
	wake    chan struct{} // closed when a commit adds entries; made by a waiter
}

func newInbox(device string, now int64, burst int) *inbox {
	return &inbox{tokens: float64(burst), refilled: now, class: classOf(device)}
}

// add appends e, whose seq is higher than every entry's.
func (ib *inbox) add(e entry) {
	ib.entries = append(ib.entries, e)
	ib.blobs++
	ib.bytes += int64(e.size)
	if ib.wake != nil {
		close(ib.wake)
		ib.wake = nil
	}
}

// after returns the index of the first entry with a seq above seq.
func (ib *inbox) after(seq Seq) int {
	live := ib.entries[ib.head:]
	return ib.head + sort.Search(len(live), func(i int) bool { return live[i].seq > seq })
}

// find returns the index of the live entry seq, or -1.
func (ib *inbox) find(seq Seq) int {
	i := ib.after(seq - 1)
	if i < len(ib.entries) && ib.entries[i].seq == seq && !ib.entries[i].dead {
		return i
	}
	return -1
}

// kill marks entry i dead; its slot stays until tidy, so indexes held by
// a caller stay valid.
func (ib *inbox) kill(i int) {
	e := &ib.entries[i]
	e.dead = true
	e.seg = nil
	ib.blobs--
	ib.bytes -= int64(e.size)
	ib.dead++
}

// tidy drops dead entries: from the head at once, from the middle when
// they outnumber the live ones.
func (ib *inbox) tidy() {
	for ib.head < len(ib.entries) && ib.entries[ib.head].dead {
		ib.head++
		ib.dead--
	}
	if ib.head == len(ib.entries) {
		ib.entries, ib.head, ib.dead = ib.entries[:0], 0, 0
		return
	}
	if ib.dead > 32 && ib.dead > ib.blobs || ib.head > 32 && ib.head > len(ib.entries)/2 {
		kept := ib.entries[:0]
		for _, e := range ib.entries[ib.head:] {
			if !e.dead {
				kept = append(kept, e)
			}
		}
		clear(ib.entries[len(kept):])
		ib.entries, ib.head, ib.dead = kept, 0, 0
	}
}

// take spends one token of the bucket (rate a second, burst deep) at now;
// false means the push is over the rate. A negative rate is no limit.
func (ib *inbox) take(now int64, rate float64, burst int) bool {
	if rate < 0 {
		return true
	}
	ib.refill(now, rate, burst)
	if ib.tokens < 1 {
		return false
	}
	ib.tokens--
	return true
}

func (ib *inbox) refill(now int64, rate float64, burst int) {
	if now > ib.refilled {
		ib.tokens = min(float64(burst), ib.tokens+float64(now-ib.refilled)*rate/1e9)
		ib.refilled = now
	}
}

// idle reports whether the inbox can be forgotten: nothing in it or on its
// way, no session waiting, and a full bucket (so forgetting it grants no
// extra pushes).
func (ib *inbox) idle(now int64, rate float64, burst int) bool {
	if ib.blobs > 0 || ib.pendingBlobs > 0 || ib.waiters > 0 {
		return false
	}
	if rate < 0 {
		return true
	}
	ib.refill(now, rate, burst)
	return ib.tokens >= float64(burst)
}
