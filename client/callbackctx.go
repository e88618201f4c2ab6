package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callbackCtx is the context a callback runs with: the client's context
// with the sender's deadline, done when the callback returns. It is
// context.WithDeadline made lazily: the timer and the cancellable context
// exist only once the callback asks for Done (to wait on it, or to derive
// a context from it); most handlers compute and return, and a timer per
// callback cost three allocations and two timer-heap operations on every
// request. Deadline, Err and Value answer without it.
type callbackCtx struct {
	parent   context.Context
	deadline time.Time // zero: none

	mu     sync.Mutex  // held while ctx is made (a sync.Once would cost a closure per callback)
	made   atomic.Bool // set once ctx is, under mu
	ctx    context.Context
	cancel context.CancelFunc    // nil unless ctx was made live
	ended  atomic.Pointer[error] // the first error Err reported before ctx was made
}

// Contexts that ended: what a callback's context becomes when it had
// ended (or its callback returned) before anyone asked for Done.
var (
	released = func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}()
	expired = func() context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), time.Time{})
		cancel()
		return ctx
	}()
)

func endedWith(err error) context.Context {
	if err == context.DeadlineExceeded {
		return expired
	}
	return released
}

func (c *Client) callbackContext(deadline time.Time) *callbackCtx {
	return &callbackCtx{parent: c.ctx, deadline: deadline}
}

// inner is the context itself, made on first need.
func (l *callbackCtx) inner() context.Context {
	if l.made.Load() {
		return l.ctx
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.made.Load() {
		switch err := l.firstErr(); {
		case err != nil:
			l.ctx = endedWith(err) // the error Err already reported stays
		case l.deadline.IsZero():
			l.ctx, l.cancel = context.WithCancel(l.parent)
		default:
			l.ctx, l.cancel = context.WithDeadline(l.parent, l.deadline)
		}
		l.made.Store(true)
	}
	return l.ctx
}

// release ends the context when the callback returns, as the cancel of
// context.WithDeadline would.
func (l *callbackCtx) release() {
	l.mu.Lock()
	if !l.made.Load() {
		err := l.firstErr()
		if err == nil {
			err = context.Canceled
		}
		l.ctx = endedWith(err)
		l.made.Store(true)
	}
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// firstErr is Err before the context is made: the deadline or the
// parent's end, whichever was seen first, then always that one.
func (l *callbackCtx) firstErr() error {
	if p := l.ended.Load(); p != nil {
		return *p
	}
	switch {
	case !l.deadline.IsZero() && !time.Now().Before(l.deadline):
		return l.remember(context.DeadlineExceeded)
	case l.parent.Err() != nil:
		return l.remember(l.parent.Err())
	}
	return nil
}

// remember keeps err as firstErr's answer unless another came first.
func (l *callbackCtx) remember(err error) error {
	l.ended.CompareAndSwap(nil, &err)
	return *l.ended.Load()
}

func (l *callbackCtx) Deadline() (time.Time, bool) {
	return l.deadline, !l.deadline.IsZero()
}

func (l *callbackCtx) Done() <-chan struct{} { return l.inner().Done() }

func (l *callbackCtx) Err() error {
	if l.made.Load() {
		return l.ctx.Err()
	}
	return l.firstErr()
}

func (l *callbackCtx) Value(key any) any {
	if l.made.Load() {
		if ctx := l.ctx; ctx != released && ctx != expired {
			return ctx.Value(key)
		}
	}
	return l.parent.Value(key)
}
