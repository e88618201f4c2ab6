package durable

import (
	"context"
	"errors"
	"sync"
	"time"

	"busbar/client"
	"busbar/wire"
)

// Serve is the device's library instance, the seed's long-running side of
// delivery: one process of the device runs it for as long as the device
// is in use (`busbar durable listen` does). It runs, until ctx ends, the
// device is closed, or a failure it cannot recover from:
//
//   - the sender: it pushes the outbox at once, whenever an entry is due,
//     whenever this or another process of the device queues one (the
//     change signal, watch.go), and — over a LiveRelay — every queued
//     entry at once each time the connection comes back (the seed's
//     "immediately on reconnect");
//   - the receiver: Run, opened again on a new session after every loss
//     of the connection, and after failures that may pass (device.db
//     locked for a while, the relay unavailable) with a backoff from
//     ReceiveRetryMin to ReceiveRetryMax;
//   - with ServeOptions.OnEvent, the delivery events, each given once to
//     a listener of the device, from the first it was not shown.
//
// It returns nil when ctx ends, ErrClosed when the device is closed,
// ErrTakenOver when a newer receive session of the device took over (two
// receivers would take it from each other in turn), a
// *RelayVersionUnsupported when the relay speaks no version of this
// library's (entries stay queued), and any other error it cannot recover
// from (the device's store, the relay refusing the session).
func (d *Device) Serve(ctx context.Context, r Relay, o ServeOptions) error {
	if d.isClosed() {
		return ErrClosed
	}
	inner, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sv := &server{d: d, r: r, o: o.withDefaults(), up: make(chan struct{}, 1)}
	if lr, ok := r.(LiveRelay); ok {
		sv.live = lr
		unwatch := lr.Notify(sv.connChanged)
		defer unwatch()
	}
	end := func(err error) {
		if err != nil {
			stop(err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.watchSignal(inner) })
	wg.Go(func() { end(sv.send(inner)) })
	wg.Go(func() { end(sv.receive(inner)) })
	if sv.o.OnEvent != nil {
		wg.Go(func() { end(sv.events(inner)) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(inner)
}

// ServeOptions configure Serve. The zero value is the defaults.
type ServeOptions struct {
	// OnEvent, if set, is given each delivery event once, oldest first,
	// on one goroutine (it should not block for long): first those no
	// listener of the device was shown (events raised while none ran are
	// buffered), then each as it is raised, by this process or another of
	// the device. Events stay buffered for Device.Events until
	// AckEvents.
	OnEvent func(Event)
	// OnDone, if set, is called once each message was handled (err nil)
	// or given up (handlerGaveUp: err is the handler's last error), after
	// its blob was acked, on the receiving goroutine: the next message
	// waits for it. A message of an interrupted session comes again and
	// is not reported twice unless it is handled again after a crash.
	OnDone func(m Message, err error)
	// OnState, if set, is told each change of the connection's state
	// (State), on the goroutine that saw it.
	OnState func(State)
	// Poll is how often the sender reads the outbox, and the events loop
	// the events, when nothing was signalled: a safety net, since changes
	// are signalled. 0 is DefaultPoll.
	Poll time.Duration
}

// DefaultPoll is ServeOptions.Poll when it is 0.
const DefaultPoll = 30 * time.Second

// ReceiveRetryMin and ReceiveRetryMax bound Serve's wait before it opens
// a receive session again after a failure that may pass. After a lost
// connection it does not wait: the connection's return is the signal.
const (
	ReceiveRetryMin = 100 * time.Millisecond
	ReceiveRetryMax = 10 * time.Second
)

func (o ServeOptions) withDefaults() ServeOptions {
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	return o
}

// StateKind names a state of the device's connection to its relay.
type StateKind string

// The states Serve reports (ServeOptions.OnState).
const (
	StateConnected    StateKind = "connected"    // the relay can be reached; the outbox is being pushed
	StateDisconnected StateKind = "disconnected" // the connection was lost; it is being made again
	// StateRetrying: a failure that may pass (State.Err), such as
	// device.db locked by another process or the relay unavailable;
	// Serve tries again after a backoff.
	StateRetrying StateKind = "retrying"
	// StateRelayVersionUnsupported: relayVersionUnsupported{min, max}
	// (State.Min, State.Max): the relay speaks no version of this
	// library's. Entries stay queued; Serve returns.
	StateRelayVersionUnsupported StateKind = "relayVersionUnsupported"
)

// State is the device's connection to its relay, as Serve sees it.
type State struct {
	Kind     StateKind
	Err      error // StateRetrying: what failed
	Min, Max int   // StateRelayVersionUnsupported: the versions the relay speaks
}

// LiveRelay is a Relay over a connection that may be lost and made again
// (NewClientRelay's, over a client that reconnects): Serve waits for it
// rather than fail, and pushes every queued entry when it comes back.
type LiveRelay interface {
	Relay
	// Connected reports whether the relay can be reached now.
	Connected() bool
	// WaitUp returns nil once the relay can be reached, or the error
	// that says it never will again (a *RelayVersionUnsupported among
	// them).
	WaitUp(ctx context.Context) error
	// Notify registers f, told each loss (false) and each return (true)
	// of the connection; f must not block. stop unregisters it.
	Notify(f func(up bool)) (stop func())
}

// VersionUnsupported returns the relayVersionUnsupported state that err
// carries — a failed connection to a relay that speaks no version of this
// library's — or nil.
func VersionUnsupported(err error) *RelayVersionUnsupported {
	var rv *RelayVersionUnsupported
	if errors.As(err, &rv) {
		return rv
	}
	var ve *client.VersionError
	if errors.As(err, &ve) {
		return &RelayVersionUnsupported{Min: ve.Min, Max: ve.Max, Have: ve.Have}
	}
	return nil
}

// server is one Serve's state: its goroutines share only what is below.
type server struct {
	d    *Device
	r    Relay
	live LiveRelay // r, when it is one
	o    ServeOptions
	up   chan struct{} // 1 slot: the connection came back since the sender last looked

	nextDue time.Time // owned by send: when the next entry waiting for its backoff is due
}

// connChanged hears the LiveRelay's connection come and go.
func (sv *server) connChanged(up bool) {
	if !up {
		sv.state(State{Kind: StateDisconnected})
		return
	}
	select {
	case sv.up <- struct{}{}:
	default:
	}
	sv.d.changes.wake() // the sender and the events loop look again
	sv.state(State{Kind: StateConnected})
}

func (sv *server) state(s State) {
	if sv.o.OnState != nil {
		sv.o.OnState(s)
	}
}

// connected reports whether the relay can be reached (a plain Relay
// always can).
func (sv *server) connected() bool { return sv.live == nil || sv.live.Connected() }

// waitUp waits for the relay; its error is one Serve cannot recover from
// (nil when ctx ended).
func (sv *server) waitUp(ctx context.Context) error {
	if sv.connected() {
		return nil
	}
	err := sv.live.WaitUp(ctx)
	if err == nil || ctx.Err() != nil {
		return nil
	}
	if rv := VersionUnsupported(err); rv != nil {
		sv.state(State{Kind: StateRelayVersionUnsupported, Min: rv.Min, Max: rv.Max, Err: rv})
		return rv
	}
	return err
}

// send is the sender loop.
func (sv *server) send(ctx context.Context) error {
	retryNow := true // a new connection: whatever waits for a backoff goes now
	pause := ReceiveRetryMin
	for ctx.Err() == nil {
		if !sv.connected() {
			// Pushing now would only spend the entries' backoff on an
			// outage that is not theirs: wait for the connection.
			if err := sv.waitUp(ctx); err != nil {
				return err
			}
			retryNow = true
			continue
		}
		select {
		case <-sv.up:
			retryNow = true
		default:
		}
		changed := sv.d.changes.wait() // taken before the flush: a change during it is not missed
		err := sv.flushOnce(ctx, retryNow)
		if ctx.Err() != nil {
			return nil
		}
		retryNow = retryNow && err != nil // a RetryNow that did not happen is still owed
		wait, err := sv.pace(&pause, err)
		if err != nil {
			return err
		}
		if due := sv.nextDue; !due.IsZero() {
			wait = min(wait, max(due.Sub(sv.d.now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
		case <-sv.up:
			retryNow = true
		}
		t.Stop()
	}
	return nil
}

// pace is how long a loop of Serve waits after a round that ended with
// err: its poll after a success; after ErrLocked (another process held
// device.db past its timeout) a backoff from ReceiveRetryMin doubling to
// ReceiveRetryMax, reported as StateRetrying. Any other error is returned:
// the loop cannot recover from it.
func (sv *server) pace(pause *time.Duration, err error) (time.Duration, error) {
	switch {
	case err == nil:
		*pause = ReceiveRetryMin
		return sv.o.Poll, nil
	case errors.Is(err, ErrLocked):
		sv.state(State{Kind: StateRetrying, Err: err})
		wait := *pause
		*pause = min(*pause*2, ReceiveRetryMax)
		return wait, nil
	}
	return 0, err
}

// flushOnce makes every entry due first when retryNow, then flushes. It
// notes when the next entry is due.
func (sv *server) flushOnce(ctx context.Context, retryNow bool) error {
	sv.nextDue = time.Time{}
	if retryNow {
		if err := sv.d.RetryNow(); err != nil {
			return err
		}
	}
	res, err := sv.d.Flush(ctx, sv.r)
	sv.nextDue = res.NextDue
	return err
}

// receive is the receiver loop: Run, again after each loss.
func (sv *server) receive(ctx context.Context) error {
	pause := ReceiveRetryMin
	for {
		if err := sv.waitUp(ctx); err != nil {
			return err
		}
		began := time.Now()
		err := sv.d.run(ctx, sv.r, sv.o.OnDone)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrClosed), errors.Is(err, ErrTakenOver), !transient(err):
			return err
		}
		ran := time.Since(began)
		lost := errors.Is(err, client.ErrDurableSession) // it ended with its connection
		if !sv.connected() || lost && ran >= ReceiveRetryMin {
			pause = ReceiveRetryMin // the connection's return is the signal: no wait then
			continue
		}
		if ran > ReceiveRetryMax {
			pause = ReceiveRetryMin // it had been working: start the backoff again
		}
		if !lost {
			sv.state(State{Kind: StateRetrying, Err: err})
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(pause*2, ReceiveRetryMax)
	}
}

// transient reports whether a receive session's failure may pass: the
// connection or the session was lost, device.db was locked, the relay
// timed out or is unavailable. A relay that refuses the session (it is no
// relay, the proof failed, a permission) and the device's own store
// failing are not.
func transient(err error) bool {
	var re *client.RequestError
	switch {
	case errors.Is(err, ErrLocked), errors.Is(err, client.ErrDurableSession):
		return true
	case errors.As(err, &re):
		return re.Kind != wire.ResultRejected
	}
	return false
}

// events gives the delivery events to OnEvent, from the first no listener
// was shown, then as they are raised; when ctx ends it gives those raised
// until then (the last message's handlerGaveUp, say) and returns.
func (sv *server) events(ctx context.Context) error {
	pause := ReceiveRetryMin
	for {
		changed := sv.d.changes.wait()
		err := sv.showEvents()
		if ctx.Err() != nil {
			return nil
		}
		wait, err := sv.pace(&pause, err)
		if err != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = sv.showEvents()
			return nil
		case <-t.C:
		case <-changed:
		}
		t.Stop()
	}
}

// showEvents gives OnEvent the events not shown yet, and records them as
// shown.
func (sv *server) showEvents() error {
	evs, err := sv.d.unshownEvents()
	if err != nil || len(evs) == 0 {
		return err
	}
	for _, ev := range evs {
		sv.o.OnEvent(ev)
	}
	return sv.d.markShown(evs[len(evs)-1].Seq)
}
