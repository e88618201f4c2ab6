package client

import "sync"

// Executor runs callbacks off the connection's goroutines. Execute must
// not block: it returns false when it cannot take the task (the message is
// then answered BACKPRESSURED or OVERLOAD).
type Executor interface {
	Execute(task func()) bool
}

// pool is the default Executor: a bounded queue and a fixed set of workers.
//
// The queue is a ring that grows, by doubling, up to its limit as tasks
// wait, rather than a channel of the limit's capacity: every slot of a
// buffer of funcs is a pointer the garbage collector scans on each cycle,
// full or empty, and a subscriber given a DispatchQueue of 65,536 paid for
// 512 KiB of them per cycle (about 1,100 instructions per stream message
// at 128 bytes). The ring keeps the size its deepest backlog needed.
type pool struct {
	mu     sync.Mutex
	ready  sync.Cond // signalled when a task is queued or the pool closes
	closed bool
	ring   []func() // tasks[head], … in order, n of them; nil slots otherwise
	head   int
	n      int
	limit  int // the most tasks waiting at once
	idle   int // workers waiting on ready
	wg     sync.WaitGroup
}

// minRing is the ring's first size: a few batches' worth.
const minRing = 16

func newPool(workers, queue int) *pool {
	p := &pool{limit: queue}
	p.ready.L = &p.mu
	p.wg.Add(workers)
	for range workers {
		go p.work()
	}
	return p
}

func (p *pool) work() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		for p.n == 0 && !p.closed {
			p.idle++
			p.ready.Wait()
			p.idle--
		}
		if p.n == 0 { // closed and drained
			p.mu.Unlock()
			return
		}
		t := p.ring[p.head]
		p.ring[p.head] = nil // the task's closure is garbage once run
		if p.head++; p.head == len(p.ring) {
			p.head = 0
		}
		p.n--
		p.mu.Unlock()
		t()
		p.mu.Lock()
	}
}

// Execute queues task, or reports false when the queue is full or closed.
func (p *pool) Execute(task func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.n >= p.limit {
		return false
	}
	if p.n == len(p.ring) {
		p.grow()
	}
	i := p.head + p.n
	if i >= len(p.ring) {
		i -= len(p.ring)
	}
	p.ring[i] = task
	p.n++
	if p.idle > 0 {
		p.ready.Signal()
	}
	return true
}

// grow doubles the full ring (at most to limit), the tasks kept in order
// from its start.
func (p *pool) grow() {
	r := make([]func(), min(p.limit, max(minRing, 2*len(p.ring))))
	k := copy(r, p.ring[p.head:])
	copy(r[k:], p.ring[:p.head])
	p.ring, p.head = r, 0
}

// close stops taking tasks and waits for the workers to finish the queue.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.ready.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
