package edge

import (
	"errors"
	"log/slog"
	"net"
	"sync"
)

// ErrDoorClosed is what Listeners.Serve returns once Close was called.
var ErrDoorClosed = errors.New("edge: door closed")

// Listeners are the listeners one door serves, for its Close: Serve
// registers a listener and runs the accept loop on it (Accept); Close
// closes every one, ending a pause at once, and makes Serve refuse any
// later; Wait joins the accept loops. Its zero value is ready.
type Listeners struct {
	mu     sync.Mutex // guards closed and lns
	closed bool
	lns    map[net.Listener]struct{}
	wg     sync.WaitGroup // one per accept loop
}

// Serve accepts on ln under door until ln fails for good or Close closes
// it, handing each connection to serve in the accept loop's goroutine
// (serve starts its own). It closes ln when it returns. It returns
// ErrDoorClosed once Close was called (at once when it was called
// before), else what stopped ln.
func (ls *Listeners) Serve(ln net.Listener, door string, log *slog.Logger, serve func(net.Conn)) error {
	el := Listener(ln, door, log)
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		el.Close()
		return ErrDoorClosed
	}
	if ls.lns == nil {
		ls.lns = map[net.Listener]struct{}{}
	}
	ls.lns[el] = struct{}{}
	ls.wg.Add(1)
	ls.mu.Unlock()
	defer ls.wg.Done()
	defer el.Close()
	err := Accept(el, door, log, serve)
	ls.mu.Lock()
	closed := ls.closed
	delete(ls.lns, el)
	ls.mu.Unlock()
	if closed {
		return ErrDoorClosed
	}
	return err
}

// Close closes every listener being served; Serve refuses any later.
// It does not wait (Wait does) and may be called more than once.
func (ls *Listeners) Close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.closed = true
	for ln := range ls.lns {
		ln.Close()
	}
}

// Wait returns once every accept loop has returned.
func (ls *Listeners) Wait() { ls.wg.Wait() }
