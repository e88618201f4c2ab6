package bedrock

// RPC on the bedrock bus beyond the basics of services_test.go: how a
// request names its method, and calls racing Close and early answers.

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestRPCMethodKeyMatchesExactly: a request's method is data.method, as a
// JavaScript server reads it: {"Method": "open"} names no method, and in
// {"method":"safe","METHOD":"open"} the method is "safe".
// (Go's case-insensitive JSON decoding used to call "open".)
func TestRPCMethodKeyMatchesExactly(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	server := NewRPC(newBus(t, clock, w, "calc", "c1"))
	var called []string
	for _, m := range []string{"open", "safe"} {
		server.Handle(m, func(json.RawMessage, *Envelope) (any, error) { called = append(called, m); return nil, nil })
	}
	caller := newBus(t, clock, w, "ui", "u1")
	caller.Send(SendOptions{Dst: "calc", Type: TypeRequest, Data: json.RawMessage(`{"Method":"open"}`)})
	caller.Send(SendOptions{Dst: "calc", Type: TypeRequest, Data: json.RawMessage(`{"method":"safe","METHOD":"open"}`)})
	clock.Advance(3)
	if !slices.Equal(called, []string{"safe"}) {
		t.Fatalf("methods called %v; JavaScript (data.method) calls [safe]", called)
	}
}

// gateClock is a SimClock whose After can be held at its start, to
// reproduce an interleaving a RealClock and a concurrent caller allow.
type gateClock struct {
	*SimClock
	entered, release chan struct{}
}

func (c *gateClock) After(n int64, f func()) func() {
	if c.entered != nil {
		close(c.entered)
		c.entered = nil
		<-c.release
	}
	return c.SimClock.After(n, f)
}

// TestRPCCloseDuringGo: Close while a Go is between registering its call
// and arming its timeout (a bridge closing while a busbar request is being
// relayed) does not panic.
// (It used to panic.)
func TestRPCCloseDuringGo(t *testing.T) {
	sim := NewSimClock()
	clock := &gateClock{SimClock: sim}
	w := NewWorld(sim, WorldOptions{})
	bus, _ := New(Options{SelfID: "ui", InstanceID: "u1", Medium: w, Clock: clock})
	bus.Start()
	defer bus.Stop()
	r := NewRPC(bus)
	clock.entered, clock.release = make(chan struct{}), make(chan struct{})
	entered := clock.entered
	done := make(chan error, 1)
	go r.Go("calc", "add", nil, 0, func(_ Response, err error) { done <- err })
	<-entered
	// Close runs concurrently (it may wait for the call's setup to finish).
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		r.Close()
	}()
	close(clock.release)
	if p := <-panicked; p != nil {
		t.Fatalf("RPC.Close panicked: %v", p)
	}
	<-done
}

// TestRPCResponseDuringCallSetup: a res whose rid matches a call still
// being set up (the mid is predictable: iid/counter), heard on the
// medium's goroutine, does not panic.
// (It used to panic.)
func TestRPCResponseDuringCallSetup(t *testing.T) {
	sim := NewSimClock()
	clock := &gateClock{SimClock: sim}
	w := NewWorld(sim, WorldOptions{})
	bus, _ := New(Options{SelfID: "ui", InstanceID: "u1", Medium: w, Clock: clock})
	bus.Start()
	defer bus.Stop()
	r := NewRPC(bus)
	other := newBus(t, sim, w, "calc", "c1")
	other.Send(SendOptions{Dst: "ui", Type: TypeResponse, Data: json.RawMessage(`{"rid":"u1/1","ok":true}`)})
	sim.Advance(1) // the forged res is on the medium
	clock.entered, clock.release = make(chan struct{}), make(chan struct{})
	entered := clock.entered
	done := make(chan struct{})
	go func() { defer close(done); r.Go("calc", "add", nil, 0, func(Response, error) {}) }()
	<-entered
	// Delivered while the call is being set up (it may wait for the setup).
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		sim.Advance(1)
	}()
	close(clock.release)
	<-done
	if p := <-panicked; p != nil {
		t.Fatalf("answer panicked: %v", p)
	}
}
