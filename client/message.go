package client

import (
	"bytes"
	"time"
	"unsafe"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// Kind is a message's kind (seed 003).
type Kind string

// The kinds.
const (
	Event   Kind = "EVENT"
	Request Kind = "REQUEST"
	Reply   Kind = "REPLY"
)

// Message is an immutable message as a handler or caller sees it. Its
// payload was copied on the way in; Payload returns another copy.
type Message struct {
	id, channel, from, to, replyTo string
	kind                           Kind
	payload                        []byte
	deadline                       time.Time
}

func newMessage(m *wire.Message, kind Kind, deadline time.Time) *Message {
	return &Message{
		id: m.Value(wire.HeaderID), channel: m.Value(wire.HeaderCommand),
		from: m.Value(wire.HeaderFrom), to: m.Value(wire.HeaderTo), replyTo: m.Value(wire.HeaderReplyTo),
		kind: kind, payload: bytes.Clone(m.Body()), deadline: deadline,
	}
}

// messageFromView copies what a Message keeps out of a View (which aliases
// the read buffer) into one allocation: the strings and the payload share
// it, and nothing ever writes to it again.
func messageFromView(v *hotpath.View, kind Kind, deadline time.Time) *Message {
	id, channel, from := v.Value(wire.HeaderID), v.Value(wire.HeaderCommand), v.Value(wire.HeaderFrom)
	to, replyTo, body := v.Value(wire.HeaderTo), v.Value(wire.HeaderReplyTo), v.Body()
	buf := make([]byte, 0, len(id)+len(channel)+len(from)+len(to)+len(replyTo)+len(body))
	keep := func(s string) string {
		if s == "" {
			return ""
		}
		start := len(buf)
		buf = append(buf, s...)
		return unsafe.String(&buf[start], len(s))
	}
	m := &Message{id: keep(id), channel: keep(channel), from: keep(from), to: keep(to), replyTo: keep(replyTo), kind: kind, deadline: deadline}
	if len(body) > 0 {
		start := len(buf)
		buf = append(buf, body...)
		m.payload = buf[start:len(buf):len(buf)]
	}
	return m
}

// ID is the framework-assigned message id.
func (m *Message) ID() string { return m.id }

// Kind is EVENT, REQUEST or REPLY.
func (m *Message) Kind() Kind { return m.kind }

// Channel is the channel name.
func (m *Message) Channel() string { return m.channel }

// From is the authenticated source, "<node>.bus"; the broker sets it.
func (m *Message) From() string { return m.from }

// To is the target as the sender wrote it; empty for a publication.
func (m *Message) To() string { return m.to }

// ReplyTo is, on a reply, the id of the request it answers.
func (m *Message) ReplyTo() string { return m.replyTo }

// Payload returns a copy of the payload.
func (m *Message) Payload() []byte { return bytes.Clone(m.payload) }

// Data returns the payload itself, not a copy: nothing else writes to it,
// so it is safe to read from any goroutine for as long as it is kept, but
// it must never be modified (use Payload for a copy of your own). It saves
// an allocation and a copy per message on hot paths.
func (m *Message) Data() []byte { return m.payload }

// Deadline is when the sender stops waiting (zero when unknown).
func (m *Message) Deadline() time.Time { return m.deadline }

// Receipt is the outcome of Send (seed 003): ACCEPTED means the destination
// node queued the event for its handlers, not that they finished. A
// TIMED_OUT or FAILED receipt cannot prove the event was not handled.
type Receipt struct {
	ID     string      // the message id
	Result wire.Result // ACCEPTED, NO_SUBSCRIBER, NOT_CONNECTED, BACKPRESSURED, REJECTED, TIMED_OUT, FAILED
	Node   string      // the destination, as the broker resolved it
	Reason string      // for a refusal made locally, why
}

// PublishResult is one result per candidate node: the broker and every
// connected node permitted to receive the channel, the publisher included.
// It is not atomic across nodes.
type PublishResult struct {
	ID      string
	Results []wire.NodeResult // sorted by node
}
