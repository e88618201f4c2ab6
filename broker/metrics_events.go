package broker

import (
	"strconv"
	"sync"
	"time"
)

// RecentEvents is how many operator events the broker keeps for the
// dashboard: state changes, refusals and delivery issues. Older ones are
// overwritten; the counters keep the totals.
const RecentEvents = 256

// maxEventText bounds an event's free text (a refusal's reason, a value
// preview), so a peer's long strings cost the ring nothing more.
const maxEventText = 200

// The kinds of Event.
const (
	EventState     = "state"     // a state key was written or deleted here
	EventRefused   = "refused"   // a message or command refused by permissions or limits
	EventHandshake = "handshake" // a connection that did not log in
	EventSlow      = "slow"      // a slow consumer disconnected
	EventLease     = "lease"     // a node's lease expired
)

// Event is one thing an operator may want to see happen.
type Event struct {
	Seq     uint64    `json:"seq"` // increases by one per event, from 1
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Node    string    `json:"node,omitempty"`
	Subject string    `json:"subject,omitempty"` // a channel, a namespace, a command
	Key     string    `json:"key,omitempty"`     // a state key
	Text    string    `json:"text,omitempty"`
}

// eventRing keeps the last RecentEvents events.
type eventRing struct {
	mu   sync.Mutex
	buf  [RecentEvents]Event
	next uint64 // the next event's Seq - 1
}

func (r *eventRing) add(e Event) {
	e.Time = time.Now()
	e.Text = clipEvent(e.Text)
	e.Subject, e.Key = clipEvent(e.Subject), clipEvent(e.Key)
	r.mu.Lock()
	r.next++
	e.Seq = r.next
	r.buf[(r.next-1)%RecentEvents] = e
	r.mu.Unlock()
}

func clipEvent(s string) string {
	if len(s) > maxEventText {
		return s[:maxEventText] + "…"
	}
	return s
}

// Events returns the events kept with a Seq above after, oldest first:
// a caller that remembers the last Seq it saw gets only what is new.
func (b *Broker) Events(after uint64) []Event {
	r := &b.events
	r.mu.Lock()
	defer r.mu.Unlock()
	first := after + 1
	if r.next > RecentEvents && first <= r.next-RecentEvents {
		first = r.next - RecentEvents + 1
	}
	var out []Event
	for s := first; s <= r.next; s++ {
		out = append(out, r.buf[(s-1)%RecentEvents])
	}
	return out
}

// stateWritten counts and records a state write applied from c.
func (b *Broker) stateWritten(c *conn, ns, key string, deleted bool, seq uint64) {
	b.traffic.stateWrites.Add(1)
	text := "set"
	if deleted {
		text = "deleted"
	}
	b.events.add(Event{Kind: EventState, Node: c.node, Subject: ns, Key: key, Text: text + " (seq " + strconv.FormatUint(seq, 10) + ")"})
}
