package client

import (
	"bytes"
	"time"
	"unsafe"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// Kind is a message's kind (docs/messaging.md#the-model).
type Kind string

// The kinds.
const (
	Event   Kind = "EVENT"
	Request Kind = "REQUEST"
	Reply   Kind = "REPLY"
)

// Message is a message as one receiver sees it: a handler, a subscriber,
// or the caller a reply is for. Each receiver gets a Message of its own
// (two subscribers of one event on this node get two), made when the
// message arrived by copying it out of the connection's buffers, so
// nothing the sender or the connection does later changes it (the contract's
// defensively copied payload, docs/messaging.md#the-model). Its header fields never change.
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

// copyForReceiver returns m for one more receiver: the same header fields
// (immutable strings, shared) and a payload of its own.
func (m *Message) copyForReceiver() *Message {
	o := *m
	o.payload = bytes.Clone(m.payload)
	return &o
}

// messageFromView copies what a Message keeps out of a View (which aliases
// the read buffer): the strings and the payload share one buffer, which
// nothing ever writes to again, allocated with the Message itself when
// they are small (the common case: one allocation per message, not two).
// The fields are set one by one: a struct literal assigned to the new
// Message is built aside and copied with a write barrier for the whole.
func messageFromView(v *hotpath.View, kind Kind, deadline time.Time) *Message {
	id, channel, from := v.Value(wire.HeaderID), v.Value(wire.HeaderCommand), v.Value(wire.HeaderFrom)
	to, replyTo, body := v.Value(wire.HeaderTo), v.Value(wire.HeaderReplyTo), v.Body()
	m, buf := allocMessage(len(id) + len(channel) + len(from) + len(to) + len(replyTo) + len(body))
	m.kind, m.deadline = kind, deadline
	buf, m.id = keep(buf, id)
	buf, m.channel = keep(buf, channel)
	buf, m.from = keep(buf, from)
	buf, m.to = keep(buf, to)
	buf, m.replyTo = keep(buf, replyTo)
	if len(body) > 0 {
		start := len(buf)
		buf = append(buf, body...)
		m.payload = buf[start:len(buf):len(buf)]
	}
	return m
}

// keep appends s to buf, which has room for it, and returns s's copy there.
func keep(buf []byte, s string) ([]byte, string) {
	if s == "" {
		return buf, ""
	}
	start := len(buf)
	buf = append(buf, s...)
	return buf, unsafe.String(&buf[start], len(s))
}

// Messages with their data in the same allocation, by size: each struct
// fills a Go size class (416 and 640 bytes on 64-bit) with little waste.
type (
	messageWith256 struct {
		m    Message
		data [256]byte
	}
	messageWith480 struct {
		m    Message
		data [480]byte
	}
)

// allocMessage returns a new Message and an empty buffer of capacity n
// for its strings and payload, in one allocation when n is small.
func allocMessage(n int) (*Message, []byte) {
	switch {
	case n <= 256:
		x := new(messageWith256)
		return &x.m, x.data[:0:n]
	case n <= 480:
		x := new(messageWith480)
		return &x.m, x.data[:0:n]
	}
	return new(Message), make([]byte, 0, n)
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

// Payload returns the payload: the receiver's own copy, made once when the
// message arrived and shared with no other receiver, so it may be kept and
// even modified without affecting anyone else. Payload does not copy it
// again: every call returns the same bytes.
func (m *Message) Payload() []byte { return m.payload }

// Deadline is when the sender stops waiting (zero when unknown).
func (m *Message) Deadline() time.Time { return m.deadline }

// Receipt is the outcome of Send (docs/messaging.md#results): ACCEPTED means the destination
// node queued the event for its handlers, not that they finished. A
// TIMED_OUT or FAILED receipt cannot prove the event was not handled. A
// call refused before anything was sent has no receipt: Send returns an
// error and a zero Receipt.
type Receipt struct {
	ID     string      // the message id
	Result wire.Result // ACCEPTED, NO_SUBSCRIBER, NOT_CONNECTED, BACKPRESSURED, REJECTED, TIMED_OUT, FAILED
	Node   string      // the destination, as the broker resolved it
	Reason string      // for a result decided by this client (BACKPRESSURED by its own queue, FAILED), why
}

// PublishResult is one result per candidate node: the broker and every
// connected node permitted to receive the channel, the publisher included.
// It is not atomic across nodes.
type PublishResult struct {
	ID      string
	Results []wire.NodeResult // sorted by node
}
