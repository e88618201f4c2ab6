package client

import "sync"

// Executor runs callbacks off the connection's goroutines. Execute must
// not block: it returns false when it cannot take the task (the message is
// then answered BACKPRESSURED or OVERLOAD).
type Executor interface {
	Execute(task func()) bool
}

// pool is the default Executor: a bounded queue and a fixed set of workers.
type pool struct {
	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool
	tasks  chan func()
	wg     sync.WaitGroup
}

func newPool(workers, queue int) *pool {
	p := &pool{tasks: make(chan func(), queue)}
	p.wg.Add(workers)
	for range workers {
		go p.work()
	}
	return p
}

func (p *pool) work() {
	defer p.wg.Done()
	for t := range p.tasks {
		t()
	}
}

// Execute queues task, or reports false when the queue is full or closed.
func (p *pool) Execute(task func()) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return false
	}
	select {
	case p.tasks <- task:
		return true
	default:
		return false
	}
}

// close stops taking tasks and waits for the workers to finish the queue.
func (p *pool) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.tasks)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
