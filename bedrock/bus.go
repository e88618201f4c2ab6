package bedrock

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
)

// Handler receives an envelope after reassembly, echo filtering and
// address filtering. It runs on the goroutine that delivered the message
// (a clock tick or the medium's reader), as a JavaScript handler runs on
// the one thread: it may Send, and should not block.
type Handler func(e *Envelope)

// Options configure a Bus.
type Options struct {
	SelfID     string // src: this add-on's id (required)
	InstanceID string // iid: unique per instance; default 16 random hex digits
	Medium     Medium // required
	Clock      Clock  // required
}

// SendOptions is what Send takes (the JavaScript bus's SendOptions).
type SendOptions struct {
	Dst  string          // "" broadcasts
	Type string          // required
	MID  string          // reuse a specific message id; default iid/counter
	Data json.RawMessage // optional JSON
}

// Stats count what the bus dropped.
type Stats struct {
	Sent          int64 // frames handed to the medium
	SendFailures  int64 // frames the medium refused (dropped)
	BadFrames     int64 // malformed frames received
	BadEnvelopes  int64 // malformed envelopes, or another protocol version
	Echoes        int64 // our own messages heard back
	NotForUs      int64 // addressed to another add-on
	Delivered     int64 // envelopes dispatched to handlers (loopback included)
	FramesIgnored int64 // stray, duplicate or out-of-range frames
	GroupsExpired int64 // incomplete groups discarded
}

// Bus is one add-on's endpoint on the shared channel
// (docs/bedrock.md#the-protocol). Nothing is sent inline: Send queues
// frames, and at most MaxFlushPerTick leave every FlushIntervalTicks. It is
// safe for concurrent use.
type Bus struct {
	self, iid string
	medium    Medium
	clock     Clock

	mu       sync.Mutex
	handlers map[string][]*handlerReg
	any      []*handlerReg // for every type
	queue    []string      // encoded frames waiting to leave
	counter  int64
	reasm    *Reassembler
	stats    Stats
	stops    []func() // the running loops and listener; nil when stopped
	starting bool
}

type handlerReg struct{ h Handler }

// New returns a stopped bus.
func New(opts Options) (*Bus, error) {
	if opts.SelfID == "" || opts.Medium == nil || opts.Clock == nil {
		return nil, errors.New("bedrock: a bus needs SelfID, Medium and Clock")
	}
	if opts.InstanceID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.InstanceID = hex.EncodeToString(b[:])
	}
	return &Bus{self: opts.SelfID, iid: opts.InstanceID, medium: opts.Medium, clock: opts.Clock,
		handlers: map[string][]*handlerReg{}, reasm: NewReassembler()}, nil
}

// SelfID is src, this add-on's id; InstanceID is iid.
func (b *Bus) SelfID() string     { return b.self }
func (b *Bus) InstanceID() string { return b.iid }

// Clock is the bus's clock.
func (b *Bus) Clock() Clock { return b.clock }

// QueueSize is the number of frames waiting to leave.
func (b *Bus) QueueSize() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Stats returns the bus's counters.
func (b *Bus) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.FramesIgnored, s.GroupsExpired = b.reasm.Ignored(), b.reasm.Expired()
	return s
}

// Start subscribes to the medium and starts the flush and sweep loops. A
// started bus ignores Start.
func (b *Bus) Start() {
	b.mu.Lock()
	if b.stops != nil || b.starting {
		b.mu.Unlock()
		return
	}
	b.starting = true
	b.mu.Unlock()
	// Outside the lock: a medium may deliver from inside Listen.
	stops := []func(){
		b.medium.Listen(b.receive),
		b.clock.Every(FlushIntervalTicks, b.flush),
		b.clock.Every(EvictionIntervalTicks, func() {
			b.mu.Lock()
			b.reasm.Sweep(b.clock.Now())
			b.mu.Unlock()
		}),
	}
	b.mu.Lock()
	b.stops, b.starting = stops, false
	b.mu.Unlock()
}

// Stop tears down the subscription and the loops but keeps the handlers
// and the queue, so a stopped bus can be started again.
func (b *Bus) Stop() {
	b.mu.Lock()
	stops := b.stops
	b.stops = nil
	b.mu.Unlock()
	for _, s := range stops {
		s()
	}
}

// On registers h for envelopes of type typ; the returned function removes it.
func (b *Bus) On(typ string, h Handler) (unsubscribe func()) {
	reg := &handlerReg{h}
	b.mu.Lock()
	b.handlers[typ] = append(b.handlers[typ], reg)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		list := b.handlers[typ]
		for i, r := range list {
			if r == reg {
				b.handlers[typ] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
	}
}

// OnAny registers h for envelopes of every type (after the handlers of
// the type); the returned function removes it.
func (b *Bus) OnAny(h Handler) (unsubscribe func()) {
	reg := &handlerReg{h}
	b.mu.Lock()
	b.any = append(b.any, reg)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, r := range b.any {
			if r == reg {
				b.any = append(b.any[:i:i], b.any[i+1:]...)
				break
			}
		}
	}
}

// Send queues a message and returns its id. A message to this add-on
// itself never goes over the medium (it could not come back: the echo
// filter would drop it); it is delivered to the local handlers one tick
// later, as a real hop would be.
func (b *Bus) Send(o SendOptions) (string, error) {
	if o.Type == "" {
		return "", errors.New("bedrock: a message needs a type")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	mid := o.MID
	if mid == "" {
		b.counter++
		mid = b.iid + "/" + strconv.FormatInt(b.counter, 10)
	}
	e := &Envelope{V: ProtocolVersion, Src: b.self, IID: b.iid, Dst: o.Dst, Type: o.Type, MID: mid, Data: o.Data}
	text, err := AppendEnvelope(nil, e)
	if err != nil {
		return "", err
	}
	if o.Dst == b.self {
		// Deliver what a receiver would decode, not the caller's value.
		back, err := DecodeEnvelope(units(string(text)))
		if err != nil {
			return "", err
		}
		b.clock.After(1, func() { b.dispatch(back) })
		return mid, nil
	}
	frames, err := Split(mid, string(text))
	if err != nil {
		return "", err
	}
	for _, f := range frames {
		b.queue = append(b.queue, EncodeFrame(f))
	}
	return mid, nil
}

// Reply answers to (sending directly to its src) with type typ.
func (b *Bus) Reply(to *Envelope, typ string, data json.RawMessage) (string, error) {
	return b.Send(SendOptions{Dst: to.Src, Type: typ, Data: data})
}

// flush sends up to MaxFlushPerTick queued frames; a frame the medium
// refuses is dropped and counted.
func (b *Bus) flush() {
	b.mu.Lock()
	n := min(len(b.queue), MaxFlushPerTick)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	b.mu.Unlock()
	var sent, failed int64
	for _, msg := range batch {
		if err := b.medium.Send(ChannelID, msg); err != nil {
			failed++
		} else {
			sent++
		}
	}
	b.mu.Lock()
	b.stats.Sent += sent
	b.stats.SendFailures += failed
	b.mu.Unlock()
}

// receive is the receive path of docs/bedrock.md#the-protocol, in order.
func (b *Bus) receive(id, message string) {
	if id != ChannelID { // 1
		return
	}
	f, err := DecodeFrame(message) // 2
	b.mu.Lock()
	if err != nil {
		b.stats.BadFrames++
		b.mu.Unlock()
		return
	}
	text, complete := b.reasm.Add(f, b.clock.Now()) // 3
	if !complete {
		b.mu.Unlock()
		return
	}
	e, err := DecodeEnvelope(text) // 4
	switch {
	case err != nil:
		b.stats.BadEnvelopes++
	case e.IID == b.iid: // 5
		b.stats.Echoes++
	case e.Dst != "" && e.Dst != b.self: // 6
		b.stats.NotForUs++
	default:
		b.mu.Unlock()
		b.dispatch(e) // 7
		return
	}
	b.mu.Unlock()
}

// dispatch runs every handler registered for e's type.
func (b *Bus) dispatch(e *Envelope) {
	b.mu.Lock()
	list := append(append([]*handlerReg(nil), b.handlers[e.Type]...), b.any...)
	b.stats.Delivered++
	b.mu.Unlock()
	for _, r := range list {
		r.h(e)
	}
}
