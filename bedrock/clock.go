package bedrock

import (
	"sync"
	"time"
)

// Clock is the bus's time, in ticks (TicksPerSecond per second), injected
// so that tests and simulations run in simulated time. Callbacks of one
// clock never run concurrently with each other.
type Clock interface {
	Now() int64
	// Every runs f every n ticks from now until stop is called.
	Every(n int64, f func()) (stop func())
	// After runs f once, n ticks from now, unless stop is called first.
	After(n int64, f func()) (stop func())
}

// SimClock is a Clock that moves only when Advance is called, running the
// callbacks due at each tick, in the order they were scheduled, on the
// caller's goroutine. It is safe for concurrent use, but callbacks run
// only inside Advance.
type SimClock struct {
	mu    sync.Mutex
	now   int64
	seq   int64
	tasks map[int64]*simTask
	run   sync.Mutex // held by Advance: one tick at a time
}

type simTask struct {
	id    int64
	due   int64
	every int64 // 0: once
	f     func()
}

// NewSimClock returns a simulated clock at tick 0.
func NewSimClock() *SimClock { return &SimClock{tasks: map[int64]*simTask{}} }

// Now is the current tick.
func (c *SimClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *SimClock) schedule(n, every int64, f func()) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	id := c.seq
	c.tasks[id] = &simTask{id: id, due: c.now + max(n, 1), every: every, f: f}
	return func() {
		c.mu.Lock()
		delete(c.tasks, id)
		c.mu.Unlock()
	}
}

func (c *SimClock) Every(n int64, f func()) func() { return c.schedule(n, max(n, 1), f) }
func (c *SimClock) After(n int64, f func()) func() { return c.schedule(n, 0, f) }

// Advance moves the clock n ticks, running what falls due at each.
func (c *SimClock) Advance(n int64) {
	c.run.Lock()
	defer c.run.Unlock()
	for range n {
		c.mu.Lock()
		c.now++
		now := c.now
		c.mu.Unlock()
		// Tasks scheduled while this tick runs fall due later (n ≥ 1).
		for {
			t := c.nextDue(now)
			if t == nil {
				break
			}
			t.f()
		}
	}
}

// nextDue takes the earliest-scheduled task due at now, rescheduling a
// repeating one.
func (c *SimClock) nextDue(now int64) *simTask {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *simTask
	for _, t := range c.tasks {
		if t.due <= now && (best == nil || t.id < best.id) {
			best = t
		}
	}
	if best == nil {
		return nil
	}
	if best.every > 0 {
		best.due = now + best.every
	} else {
		delete(c.tasks, best.id)
	}
	return best
}

// RealClock is a Clock driven by the wall clock at TicksPerSecond: one
// goroutine, started by NewRealClock and joined by Close, runs the
// callbacks.
type RealClock struct {
	sim  *SimClock
	stop chan struct{}
	done chan struct{}
}

// NewRealClock starts a clock at tick 0.
func NewRealClock() *RealClock {
	c := &RealClock{sim: NewSimClock(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(time.Second / TicksPerSecond)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.sim.Advance(1)
			}
		}
	}()
	return c
}

func (c *RealClock) Now() int64                     { return c.sim.Now() }
func (c *RealClock) Every(n int64, f func()) func() { return c.sim.Every(n, f) }
func (c *RealClock) After(n int64, f func()) func() { return c.sim.After(n, f) }

// Close stops the clock and waits for a running callback to return.
func (c *RealClock) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}
