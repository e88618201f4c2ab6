package broker

import (
	"sync"

	"busbar/relay"
)

// relayMeter reads the relay store's figures as its pushes are answered:
// the inbox's size after each push, and the pushes of each group commit.
// It only reads the store (Stats, Inbox): the store's writer answers the
// pushes of one commit one after the other, so a change of the fsync count
// between two answers is a commit's end. A commit is observed when the
// next one's first push is answered.
type relayMeter struct {
	inbox, batch histogram

	mu     sync.Mutex
	fsyncs uint64 // the commit whose pushes n counts
	n      int64
}

// pushed observes a push to device that store committed; it runs on the
// store's writer, in the push's answer.
func (m *relayMeter) pushed(store *relay.Store, device string) {
	m.inbox.observe(int64(store.Inbox(device).Blobs), sizeBounds)
	fsyncs := store.Stats().Fsyncs
	m.mu.Lock()
	if fsyncs != m.fsyncs {
		if m.n > 0 {
			m.batch.observe(m.n, sizeBounds)
		}
		m.fsyncs, m.n = fsyncs, 0
	}
	m.n++
	m.mu.Unlock()
}
