package client

import "sync/atomic"

// Goroutine hand-offs: each time a message passes from one goroutine to
// another in this process, the second must be woken, and on a busy machine
// that wake-up, not the work, is most of a request's latency. The client
// counts its own so a test can pin how many a round trip costs
// (TestRequestRoundTripHandOffs): a request's caller and a reply's handler
// write from their own goroutine (no wake-up of the writer, counted by
// sendq.Queue.WriterWakes), and what is left is the contract's floor — the
// handler runs on an executor worker, never on the reader (tasks), and the
// reply wakes the caller waiting for it (answers).
//
// Counters, not an execution trace: a trace of the process counts every
// goroutine (the broker's in a test, the runtime's own) and needs a parser
// outside the standard library; a counter at the few places that hand off
// is exact, costs one atomic add where a channel send already happens, and
// says which hand-off came back.
type handoffs struct {
	tasks   atomic.Int64 // callbacks handed to the executor
	answers atomic.Int64 // answers handed to a caller waiting for them
}

// execute hands task to the executor, counting the hand-off: before it,
// so the count is there by the time the task (and what it answers) runs.
func (c *Client) execute(task func()) bool {
	c.handoffs.tasks.Add(1)
	if !c.exec.Execute(task) {
		c.handoffs.tasks.Add(-1)
		return false
	}
	return true
}
