package durable

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Telling a device's processes that device.db changed. Several processes
// use one device (a listener runs while `durable send` runs in another
// shell), and none keeps device.db open, so none sees another's writes by
// itself. A transaction that queues outbox entries or raises an event
// writes a fresh random token to SignalFile once it has committed; a
// running Serve reads the file every WatchInterval and, when the token
// changed, pushes the outbox and shows the events at once. Reading a file
// of 16 bytes costs far less than opening device.db, which takes its
// lock, so the watch can be frequent. Within one process the commit wakes
// Serve directly.

// SignalFile is the file in the device's directory whose content changes
// after each commit that queued outbox entries or raised an event.
const SignalFile = "device.signal"

// WatchInterval is how often Serve reads SignalFile: a message another
// process queued is pushed by a running Serve within about this long (if
// the relay can be reached).
const WatchInterval = 200 * time.Millisecond

// changes is a broadcast: wait returns a channel closed at the next wake.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *changes) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// changedIn notes that tx queues outbox entries or raises an event:
// update signals the change once tx has committed. update runs one
// transaction of the device at a time (device.db's file lock orders them
// across goroutines and processes), so one flag is enough.
func (d *Device) changedIn(*bolt.Tx) { d.txChanged.Store(true) }

// signal tells the device's processes that device.db changed: this
// process's Serve at once, the others through SignalFile. A failed write
// costs only speed: the others find the change at their next poll.
func (d *Device) signal() {
	d.changes.wake()
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	text := hex.EncodeToString(tok[:])
	d.ownSignal.Store(&text) // this process's watch need not wake for it again
	_ = os.WriteFile(filepath.Join(d.dir, SignalFile), []byte(text), 0o600)
}

// watchSignal reads SignalFile every WatchInterval until ctx ends, and
// wakes this process's waiters when another process changed it.
func (d *Device) watchSignal(ctx context.Context) {
	path := filepath.Join(d.dir, SignalFile)
	last, _ := os.ReadFile(path)
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.Equal(b, last) {
			continue
		}
		last = b
		if own := d.ownSignal.Load(); own == nil || *own != string(b) {
			d.changes.wake()
		}
	}
}
