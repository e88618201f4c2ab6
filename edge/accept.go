package edge

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"
)

// The pause after a temporary accept failure: AcceptPauseMin after the
// first of a burst, doubled after each further one up to AcceptPauseMax
// (nats-server's acceptError and net/http's Server.Serve do the same).
// A pause leaves the descriptors a flood holds time to close; accepting
// again at once would spin on the same error.
const (
	AcceptPauseMin = 5 * time.Millisecond
	AcceptPauseMax = time.Second
)

// AcceptLogInterval is the least time between two "accept failed" lines
// of one listener: the line says how many failures it covers.
const AcceptLogInterval = time.Second

// Temporary reports whether an accept error passes on its own (the
// process or the system is out of descriptors or buffers for now, a peer
// gave up before its connection was accepted): the listener is still
// good and a later Accept may succeed.
func Temporary(err error) bool {
	if err == nil || errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range temporaryErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// temporaryErrnos are the accept failures that pass on their own, beyond
// those syscall.Errno itself calls temporary (EMFILE, ENFILE,
// ECONNABORTED, ECONNRESET, EAGAIN, EINTR).
var temporaryErrnos = []error{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED,
	syscall.ENOBUFS, syscall.ENOMEM, syscall.EPROTO, syscall.EPERM}

// Listener wraps ln so that its Accept retries every temporary failure
// (Temporary) after a growing pause, logging at most once per AcceptLogInterval, and returns
// only when ln fails for good: closed, or an error that is not
// temporary. door names it in the log and in AcceptFailures.
func Listener(ln net.Listener, door string, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &listener{Listener: ln, door: door, log: log, done: make(chan struct{})}
}

type listener struct {
	net.Listener
	door string
	log  *slog.Logger

	closeOnce sync.Once
	done      chan struct{} // closed by Close: a pause ends at once

	mu       sync.Mutex // one Accept at a time owns the fields below
	burst    int        // failures in a row: the pause grows with it
	unlogged int        // failures since the last line logged
	logged   time.Time  // when the last "accept failed" line was written
	since    time.Time  // when the failures that line reported began
	open     bool       // a line was written and no "accepting again" since
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		nc, err := l.Listener.Accept()
		if err == nil {
			l.recovered()
			return nc, nil
		}
		if !Temporary(err) {
			return nil, err
		}
		if !l.pause(err) {
			return nil, net.ErrClosed
		}
	}
}

// pause counts a temporary failure, logs it unless a line was written
// within AcceptLogInterval, and waits before the next try; false: the
// listener was closed meanwhile.
func (l *listener) pause(err error) bool {
	acceptFailures.Add(l.door, 1)
	l.unlogged++
	if now := time.Now(); now.Sub(l.logged) >= AcceptLogInterval {
		if !l.open {
			l.since = now
		}
		l.log.Warn("accept failed; retrying with a growing pause until it passes", "door", l.door,
			"addr", l.Addr().String(), "err", err, "failures", l.unlogged)
		l.logged, l.unlogged, l.open = now, 0, true
	}
	l.burst++
	d := AcceptPauseMin << min(l.burst-1, 8)
	t := time.NewTimer(min(d, AcceptPauseMax))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// recovered ends a run of failures: the pause starts again from
// AcceptPauseMin, and once a second at most the log hears that the door
// accepts again. A flood that keeps the process at its limit makes
// accepts alternate with failures: that is two lines a second per door.
func (l *listener) recovered() {
	l.burst = 0
	if !l.open || time.Since(l.logged) < AcceptLogInterval {
		return
	}
	l.log.Info("accepting again", "door", l.door, "addr", l.Addr().String(),
		"failures_not_logged", l.unlogged, "since", time.Since(l.since).Round(time.Millisecond))
	l.open, l.unlogged = false, 0
}

// Accept serves ln until it fails for good: each connection goes to
// serve, called in Accept's goroutine (serve starts its own for the
// connection's life). A temporary failure is retried as Listener retries
// it. It returns the error that stopped ln (net.ErrClosed once it was
// closed).
func Accept(ln net.Listener, door string, log *slog.Logger, serve func(net.Conn)) error {
	el, ok := ln.(*listener)
	if !ok {
		el = Listener(ln, door, log).(*listener)
	}
	for {
		nc, err := el.Accept()
		if err != nil {
			return err
		}
		serve(nc)
	}
}
