package client

// HandOffs reports c's goroutine hand-offs so far (handoffs.go): callbacks
// handed to the executor, answers handed to waiting callers, and the
// wake-ups of the live connection's writer goroutine.
func HandOffs(c *Client) (tasks, answers, writerWakes int64) {
	if cn := c.cur.Load(); cn != nil {
		writerWakes = cn.out.WriterWakes()
	}
	return c.handoffs.tasks.Load(), c.handoffs.answers.Load(), writerWakes
}
