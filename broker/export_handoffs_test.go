package broker

// WriterWakes is, for each queue of b, its writer goroutine's wake-ups
// so far (sendq.Queue.WriterWakes): node connections by node name, links
// to other brokers by "link:" and the broker's name. A test counts the
// hand-offs a flow costs b with it.
func WriterWakes(b *Broker) map[string]int64 {
	out := map[string]int64{}
	for _, c := range b.dir.all() { // registered nodes, in-process ones included
		out[c.node] = c.out.WriterWakes()
	}
	if b.cl != nil {
		b.cl.lmu.Lock()
		for name, c := range b.cl.links {
			out["link:"+name] = c.out.WriterWakes()
		}
		b.cl.lmu.Unlock()
	}
	return out
}
