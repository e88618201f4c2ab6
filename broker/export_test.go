package broker

// What the tests of package broker_test, which drive the broker over real
// sockets, may see of its internals: only what they wait on.

// LoginProgress is, oldest first, how much of a valid hello each peer
// holding a place in the network login pool has sent (see helloScan), so
// a test can wait until the broker has read what a peer sent.
func LoginProgress(b *Broker) []int64 {
	b.hs.mu.Lock()
	defer b.hs.mu.Unlock()
	var ps []int64
	for e := b.hs.net.order.Front(); e != nil; e = e.Next() {
		ps = append(ps, e.Value.(*loginPlace).progress.Load())
	}
	return ps
}
