package client

// A callback's context: the client's context with the sender's deadline,
// made lazily, behaving as context.WithDeadline would.

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func lazyCtx(t *testing.T, deadline time.Time) (*callbackCtx, context.CancelFunc) {
	t.Helper()
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	t.Cleanup(cancel)
	return &callbackCtx{parent: parent, deadline: deadline}, cancel
}

func TestCallbackContextEndsAtTheDeadline(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	l, _ := lazyCtx(t, deadline)
	if d, ok := l.Deadline(); !ok || !d.Equal(deadline) {
		t.Fatalf("Deadline %v %v", d, ok)
	}
	if l.Err() != nil || l.Value(ctxKey{}) != "v" {
		t.Fatalf("before the deadline: %v %v", l.Err(), l.Value(ctxKey{}))
	}
	child, cancel := context.WithTimeout(l, time.Hour) // capped by the deadline
	defer cancel()
	if d, _ := child.Deadline(); !d.Equal(deadline) {
		t.Fatalf("child deadline %v", d)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the deadline")
	}
	<-child.Done()
	if !errors.Is(l.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the deadline: %v, child %v", l.Err(), child.Err())
	}
	l.release()
	if !errors.Is(l.Err(), context.DeadlineExceeded) {
		t.Fatalf("after release: %v", l.Err())
	}
}

func TestCallbackContextErrWithoutDone(t *testing.T) {
	// Past its deadline, never asked for Done: Err says so, and a Done
	// asked for afterwards is closed.
	l, _ := lazyCtx(t, time.Now().Add(-time.Millisecond))
	if !errors.Is(l.Err(), context.DeadlineExceeded) {
		t.Fatalf("%v", l.Err())
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open past the deadline")
	}
	// The parent ends (the client closes): so does the callback's.
	l, cancel := lazyCtx(t, time.Time{})
	if _, ok := l.Deadline(); ok {
		t.Fatal("a deadline from nowhere")
	}
	cancel()
	if !errors.Is(l.Err(), context.Canceled) {
		t.Fatalf("%v", l.Err())
	}
	l, cancel = lazyCtx(t, time.Time{})
	done := l.Done()
	cancel()
	<-done
	if !errors.Is(l.Err(), context.Canceled) {
		t.Fatalf("%v", l.Err())
	}
}

func TestCallbackContextEndsWhenTheCallbackReturns(t *testing.T) {
	for _, asked := range []bool{false, true} {
		l, _ := lazyCtx(t, time.Now().Add(time.Hour))
		var done <-chan struct{}
		if asked {
			done = l.Done()
		}
		l.release() // the callback returned
		if !errors.Is(l.Err(), context.Canceled) {
			t.Fatalf("asked %v: %v", asked, l.Err())
		}
		if done == nil {
			done = l.Done() // a goroutine the callback left behind asks late
		}
		select {
		case <-done:
		default:
			t.Fatalf("asked %v: Done open after release", asked)
		}
		if l.Value(ctxKey{}) != "v" {
			t.Fatalf("asked %v: value lost", asked)
		}
	}
	l, _ := lazyCtx(t, time.Now().Add(time.Hour))
	if a := testing.AllocsPerRun(100, func() {
		l := &callbackCtx{parent: l.parent, deadline: l.deadline}
		_ = l.Err()
		l.release()
	}); a > 1 {
		t.Fatalf("%.0f allocations for a callback that never waits, want at most 1", a)
	}
}

func TestCallbackContextErrNeverChanges(t *testing.T) {
	// Past the deadline, then the client closes: Err stays what it said
	// first, before and after the context is made.
	l, cancel := lazyCtx(t, time.Now().Add(-time.Millisecond))
	if !errors.Is(l.Err(), context.DeadlineExceeded) {
		t.Fatalf("%v", l.Err())
	}
	cancel()
	if !errors.Is(l.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the parent ended: %v", l.Err())
	}
	<-l.Done()
	l.release()
	if !errors.Is(l.Err(), context.DeadlineExceeded) {
		t.Fatalf("after Done and release: %v", l.Err())
	}
}
