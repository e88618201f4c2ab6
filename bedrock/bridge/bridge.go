// Package bridge joins a bedrock world (package bedrock: add-ons on one
// size-capped broadcast medium) to a busbar broker:
//
//   - every add-on heard on the medium is announced in the broker's
//     registry as a service of its id, handling CallChannel, so busbar
//     nodes reach it by its bare name;
//   - a busbar request on CallChannel, with a body {"method", "params"},
//     becomes a bedrock req to the add-on, and its res the reply (ok:
//     the data; an error: a handler failure, rc 10; no answer: rc 20);
//   - add-ons call busbar services through the bridge's own method
//     RequestMethod, {"target", "channel", "payload"};
//   - every bedrock namespace is replicated into the busbar namespace
//     StatePrefix+ns (owned by the bridge's node), holding what the
//     JavaScript replicas hold (every add-on's writes, by
//     last-write-wins); the busbar namespaces named in Options.ExportState
//     are replicated into bedrock namespaces the bridge owns, and keep
//     busbar's rule: a write to one from the medium is undone;
//   - bedrock envelopes of other types are emitted on busbar channel
//     EventPrefix+type, and busbar events on the channels of
//     Options.ExportEvents are broadcast on the medium with the channel
//     as their type.
//
// A busbar payload too large for one medium message is chunked by the
// bedrock bus, never truncated; the medium's rate limit (50 frames per
// tick) paces it.
package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"busbar/bedrock"
	"busbar/client"
	"busbar/state"
	"busbar/wire"
)

// Names on the busbar side.
const (
	CallChannel   = "bedrock.call"   // requests to add-ons: {"method", "params"}
	StatePrefix   = "bedrock."       // busbar namespace of bedrock namespace ns: StatePrefix+ns
	EventPrefix   = "bedrock.event." // bedrock envelopes of other types, by type
	RequestMethod = "busbar.request" // the bridge's method for add-ons: {"target", "channel", "payload"}
	ServiceName   = "bedrock-bridge" // what the bridge announces itself as on the medium
)

// CallTimeout bounds a busbar request relayed to an add-on when the
// caller's deadline is longer: bedrock's own RPC timeout.
const CallTimeout = bedrock.DefaultRPCTimeoutTicks * time.Second / bedrock.TicksPerSecond

// Options configure a Bridge.
type Options struct {
	Client       *client.Client // connected to the broker (required)
	Bus          *bedrock.Bus   // on the medium, not started (required)
	ExportState  []string       // busbar namespaces mirrored into bedrock namespaces of the same name
	ExportEvents []string       // busbar channels whose events are broadcast on the medium
	Logger       *slog.Logger
}

// Bridge runs the joins described in the package documentation.
type Bridge struct {
	opts  Options
	c     *client.Client
	bus   *bedrock.Bus
	rpc   *bedrock.RPC
	disc  *bedrock.Discovery
	state *bedrock.State
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	exportMu sync.Mutex                        // held while writing an exported namespace to the medium
	exports  map[string]map[string]state.Entry // guarded by exportMu: busbar's entries of each exported namespace

	mu        sync.Mutex
	announced map[string]bool // add-on ids announced to the broker
	exported  map[string]bool // bedrock namespaces the bridge owns (exports)
	jobs      []func()        // busbar-bound work, in the order the medium brought it
	wake      chan struct{}   // signals the worker
	closing   bool            // Close began: no new work

	scope  *client.Scope // every registration the bridge makes on the client
	unhook []func()      // bus handlers to remove
}

// MaxPendingJobs bounds the busbar-bound work (registry updates, state
// mirroring, events) waiting for the broker; past it, work is dropped and
// logged, and a bedrock resync later repairs mirrored state.
const MaxPendingJobs = 65536

// New starts a bridge. Close stops it (and the bus); the client stays the
// caller's.
func New(ctx context.Context, opts Options) (*Bridge, error) {
	if opts.Client == nil || opts.Bus == nil {
		return nil, errors.New("bridge: Client and Bus are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bridge{opts: opts, c: opts.Client, bus: opts.Bus, log: opts.Logger,
		announced: map[string]bool{}, exported: map[string]bool{}, exports: map[string]map[string]state.Entry{},
		wake: make(chan struct{}, 1)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.scope = b.c.Scope("bedrock-bridge")
	if _, err := b.scope.Channel(CallChannel).Handle(ctx, b.call); err != nil {
		_ = b.scope.Close()
		return nil, fmt.Errorf("bridge: handling %s: %w", CallChannel, err)
	}
	b.wg.Go(b.work)
	b.rpc = bedrock.NewRPC(b.bus)
	b.rpc.HandleAsync(RequestMethod, b.request)
	b.state = bedrock.NewState(b.bus, bedrock.StateOptions{OnChange: b.stateChanged, ResyncTicks: ResyncTicks})
	b.unhook = append(b.unhook, b.bus.OnAny(b.importEvent))
	b.bus.Start()
	b.disc = bedrock.NewDiscovery(b.bus, bedrock.AnnounceData{Version: wire.ProtocolVersion}, b.peer)
	b.state.Follow("")
	for _, ch := range opts.ExportEvents {
		if _, err := b.scope.Channel(ch).Subscribe(ctx, b.exportEvent); err != nil {
			b.Close()
			return nil, fmt.Errorf("bridge: subscribing to %s: %w", ch, err)
		}
	}
	for _, ns := range opts.ExportState {
		if err := b.exportState(ctx, ns); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// ResyncTicks is how often the bridge asks the medium for every
// namespace's snapshot (30 s): it repairs mirrored state after a loss.
const ResyncTicks = 30 * bedrock.TicksPerSecond

// Close stops the bridge and its bus, withdraws the add-ons it announced
// and releases everything it registered on the client, which stays the
// caller's.
func (b *Bridge) Close() {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return
	}
	b.closing = true
	b.mu.Unlock()
	if b.disc != nil {
		b.disc.Close()
	}
	b.state.Close()
	b.rpc.Close()
	for _, u := range b.unhook {
		u()
	}
	b.bus.Stop()
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	announced := make([]string, 0, len(b.announced))
	for src := range b.announced {
		announced = append(announced, src)
	}
	b.announced = map[string]bool{}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, src := range announced {
		_ = b.c.Withdraw(ctx, src)
	}
	_ = b.scope.Close()
}

// enqueue adds busbar-bound work; the worker runs it in order, off the
// bus's goroutine, since the broker round trips may wait.
func (b *Bridge) enqueue(job func()) {
	b.mu.Lock()
	b.enqueueLocked(job)
	b.mu.Unlock()
}

// enqueueLocked is enqueue with b.mu held, so work decided under the lock
// (a registry update) is queued in the order it was decided.
func (b *Bridge) enqueueLocked(job func()) {
	if b.closing {
		return
	}
	if len(b.jobs) >= MaxPendingJobs {
		b.log.Warn("bridge work dropped: the broker is not keeping up")
		return
	}
	b.jobs = append(b.jobs, job)
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *Bridge) work() {
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.wake:
		}
		for {
			b.mu.Lock()
			if len(b.jobs) == 0 {
				b.mu.Unlock()
				break
			}
			job := b.jobs[0]
			b.jobs = b.jobs[1:]
			b.mu.Unlock()
			if b.ctx.Err() != nil {
				return
			}
			job()
		}
	}
}

// peer announces each add-on heard to the broker (and withdraws it when it
// goes silent).
func (b *Bridge) peer(ev bedrock.PeerEvent) {
	src := ev.Peer.Src
	if wire.ValidLabel(src) != nil || src == ServiceName {
		return // not a name busbar can address
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev.Op {
	case "up":
		if b.announced[src] {
			return
		}
		b.announced[src] = true
	case "gone":
		if !b.announced[src] || b.stillHeard(src) {
			return
		}
		delete(b.announced, src)
	default:
		return
	}
	b.enqueueLocked(func() {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		var err error
		if ev.Op == "up" {
			_, err = b.c.Announce(ctx, wire.Announcement{Service: src, Version: ev.Peer.Version,
				SchemaVersion: ev.Peer.SchemaVersion, Meta: ev.Peer.Meta, Channels: []string{CallChannel}})
		} else {
			err = b.c.Withdraw(ctx, src)
		}
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("registry update failed", "addon", src, "op", ev.Op, "err", err)
		}
	})
}

// stillHeard reports whether another instance of src is still a peer.
func (b *Bridge) stillHeard(src string) bool {
	for _, p := range b.disc.Peers() {
		if p.Src == src {
			return true
		}
	}
	return false
}

// callBody is the body of a busbar request on CallChannel.
type callBody struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// call relays a busbar request to the add-on its target names.
func (b *Bridge) call(ctx context.Context, m *client.Message) ([]byte, error) {
	addon, err := addonOf(m.To())
	if err != nil {
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: err.Error()}
	}
	if addon == b.bus.SelfID() {
		// The bridge's own methods are for add-ons: a busbar caller must
		// not act through the bridge's node.
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: "the bridge itself takes no calls from busbar"}
	}
	var body callBody
	if err := exactly(m.Payload(), map[string]any{"method": &body.Method, "params": &body.Params}); err != nil || body.Method == "" {
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: `a call's body is {"method": "...", "params": ...}`}
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	data, err := b.rpc.Call(ctx, addon, body.Method, body.Params)
	var remote *bedrock.RemoteError
	switch {
	case errors.As(err, &remote):
		return nil, &client.HandlerError{RC: wire.RCError, Text: remote.Text}
	case err != nil:
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: addon + ": " + err.Error()}
	}
	return data, nil
}

// addonOf is the add-on a call's target names: a bare service, or the
// service part of an address.
func addonOf(to string) (string, error) {
	t, err := wire.ParseTarget(to)
	switch {
	case err != nil:
		return "", err
	case t.Kind == wire.TargetService:
		return t.Service, nil
	case t.Kind == wire.TargetAddress && t.Addr.Service != "":
		return t.Addr.Service, nil
	}
	return "", fmt.Errorf("target %q names no add-on: address it as <addon> or <addon>.<bridge>.bus", to)
}

// requestBody is the params of RequestMethod.
type requestBody struct {
	Target  string          `json:"target"`
	Channel string          `json:"channel"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// request is an add-on calling a busbar service. It answers
// asynchronously, from its own goroutine, so the bus is not held up.
func (b *Bridge) request(params json.RawMessage, from *bedrock.Envelope, reply func(any, error)) {
	if from.IID == b.bus.InstanceID() {
		reply(nil, errors.New("the bridge does not call busbar on its own behalf"))
		return
	}
	var r requestBody
	if err := exactly(params, map[string]any{"target": &r.Target, "channel": &r.Channel, "payload": &r.Payload}); err != nil || r.Target == "" || r.Channel == "" {
		reply(nil, errors.New(`params are {"target", "channel", "payload"}`))
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		reply(nil, errors.New("the bridge is closing"))
		return
	}
	b.wg.Go(func() {
		ctx, cancel := context.WithTimeout(b.ctx, CallTimeout)
		defer cancel()
		m, err := b.scope.Channel(r.Channel).Request(ctx, r.Target, payloadBytes(r.Payload))
		if err != nil {
			reply(nil, err)
			return
		}
		reply(jsonOrString(m.Payload()), nil)
	})
}

// importEvent emits a bedrock envelope of a type outside the protocol on
// busbar channel EventPrefix+type, with its data as the payload.
func (b *Bridge) importEvent(e *bedrock.Envelope) {
	switch e.Type {
	case bedrock.TypeAnnounce, bedrock.TypeWhois, bedrock.TypeRequest, bedrock.TypeResponse,
		bedrock.TypeStateDelta, bedrock.TypeStateRequest, bedrock.TypeStateSnapshot:
		return
	}
	payload := []byte(e.Data)
	b.enqueue(func() {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		if err := b.scope.Channel(EventPrefix+e.Type).Emit(ctx, payload); err != nil && b.ctx.Err() == nil {
			b.log.Warn("event not imported", "type", e.Type, "from", e.Src, "err", err)
		}
	})
}

// exactly decodes the JSON object raw into fields by exact key, as
// JavaScript reads an object (json.Unmarshal into a struct would also
// match "Method" or "METHOD"); other keys are ignored.
func exactly(raw []byte, fields map[string]any) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return errors.New("not a JSON object")
	}
	for k, dst := range fields {
		if v, ok := obj[k]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return nil
}

// payloadBytes is the busbar payload for a JSON value: a JSON string's
// text, else the JSON itself.
func payloadBytes(v json.RawMessage) []byte {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return []byte(s)
	}
	return v
}

// jsonOrString is a busbar payload as a JSON value: itself when it is
// JSON, else a JSON string.
func jsonOrString(p []byte) json.RawMessage {
	if json.Valid(p) {
		return p
	}
	s, _ := json.Marshal(string(p))
	return s
}

// stateChanged mirrors a bedrock namespace's change into busbar.
func (b *Bridge) stateChanged(c bedrock.StateChange) {
	b.mu.Lock()
	exported := b.exported[c.NS]
	b.mu.Unlock()
	if exported {
		if c.Entry.Source != b.bus.SelfID() {
			b.undo(c.NS, c.Entry)
		}
		return // it came from busbar
	}
	e := c.Entry
	b.enqueue(func() {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		ns := b.c.State(StatePrefix + c.NS)
		var err error
		if e.Deleted {
			_, err = ns.Delete(ctx, e.Key)
		} else {
			_, err = ns.Set(ctx, e.Key, e.Value)
		}
		if err != nil && !errors.Is(err, client.ErrSuperseded) && b.ctx.Err() == nil {
			b.log.Warn("state mirror failed", "ns", c.NS, "key", e.Key, "err", err)
		}
	})
}

// exportState makes the bridge the owner of bedrock namespace ns and keeps
// it equal to busbar namespace ns.
func (b *Bridge) exportState(ctx context.Context, ns string) error {
	b.mu.Lock()
	b.exported[ns] = true
	b.mu.Unlock()
	if err := b.state.Own(ns); err != nil {
		return fmt.Errorf("bridge: exporting %s: %w", ns, err)
	}
	w, err := b.c.State(ns).Watch(b.ctx)
	if err != nil {
		return fmt.Errorf("bridge: watching %s: %w", ns, err)
	}
	put := func(e state.Entry) {
		b.exportMu.Lock()
		defer b.exportMu.Unlock()
		if b.exports[ns] == nil {
			b.exports[ns] = map[string]state.Entry{}
		}
		b.exports[ns][e.Key] = e
		b.writeExported(ns, e.Key)
	}
	for _, e := range w.Initial().Entries {
		put(e)
	}
	b.wg.Go(func() {
		for e := range w.Changes() {
			put(e)
		}
	})
	return nil
}

// undo answers an add-on's write to an exported namespace: the namespace
// is busbar's, and busbar's rule lets only its owner write it (the bridge,
// for busbar). The JavaScript replicas applied the write, so the bridge
// writes busbar's entry again; its version is past the add-on's, so every
// replica takes it back. A write of busbar's value is left alone, so two
// bridges exporting one namespace do not undo each other forever.
func (b *Bridge) undo(ns string, e state.Entry) {
	b.exportMu.Lock()
	defer b.exportMu.Unlock()
	if mine, ok := b.exports[ns][e.Key]; ok && mine.Deleted == e.Deleted && bytes.Equal(mine.Value, e.Value) ||
		!ok && e.Deleted {
		return
	}
	b.writeExported(ns, e.Key)
}

// writeExported writes busbar's entry of key (a tombstone if busbar has
// none) to the medium. Called with exportMu held, so a change from busbar
// and an undo cannot cross.
func (b *Bridge) writeExported(ns, key string) {
	var err error
	if e, ok := b.exports[ns][key]; ok && !e.Deleted {
		var w state.Entry
		if w, err = b.state.Set(ns, key, e.Value); err == nil {
			e.Value = w.Value // as the medium carries it, for undo's comparison
			b.exports[ns][key] = e
		}
	} else {
		_, err = b.state.Delete(ns, key)
	}
	if err != nil {
		b.log.Warn("exported state not written to the medium", "ns", ns, "key", key, "err", err)
	}
}

// exportEvent broadcasts a busbar event on the medium.
func (b *Bridge) exportEvent(_ context.Context, m *client.Message) {
	if _, err := b.bus.Send(bedrock.SendOptions{Type: m.Channel(), Data: jsonOrString(m.Payload())}); err != nil {
		b.log.Warn("event not exported", "channel", m.Channel(), "err", err)
	}
}
