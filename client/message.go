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
	// data holds the header fields and then the payload, contiguous and
	// written once; ends[i] is where field i ends (each starts where the
	// one before ends). Offsets rather than strings and a payload slice
	// pointing into data: every pointer in a Message is one more for the
	// garbage collector to find the object of and mark, on every cycle,
	// and six of them into the Message's own allocation cost more than
	// the copy.
	data     []byte
	ends     [nFields]uint32
	kind     kindCode        // not Kind: a string is a pointer too
	deadline hotpath.Instant // not time.Time, whose *Location is one more pointer
}

// kindCode is a Kind as Message keeps it.
type kindCode uint8

const (
	codeEvent kindCode = iota
	codeRequest
	codeReply
)

var kinds = [...]Kind{codeEvent: Event, codeRequest: Request, codeReply: Reply}

// code is k as Message keeps it.
func (k Kind) code() kindCode {
	switch k {
	case Request:
		return codeRequest
	case Reply:
		return codeReply
	}
	return codeEvent
}

// The header fields a Message keeps, in data's order.
const (
	fieldID = iota
	fieldChannel
	fieldFrom
	fieldTo
	fieldReplyTo
	nFields
)

func newMessage(m *wire.Message, kind Kind, deadline hotpath.Instant) *Message {
	return buildMessage(kind, deadline, [nFields]string{
		m.Value(wire.HeaderID), m.Value(wire.HeaderCommand), m.Value(wire.HeaderFrom),
		m.Value(wire.HeaderTo), m.Value(wire.HeaderReplyTo),
	}, m.Body())
}

// messageFromView copies what a Message keeps out of a View (which aliases
// the read buffer).
func messageFromView(v *hotpath.View, kind Kind, deadline hotpath.Instant) *Message {
	return buildMessage(kind, deadline, [nFields]string{
		v.Value(wire.HeaderID), v.Value(wire.HeaderCommand), v.Value(wire.HeaderFrom),
		v.Value(wire.HeaderTo), v.Value(wire.HeaderReplyTo),
	}, v.Body())
}

// buildMessage copies fields and body into a new Message: one buffer,
// which nothing ever writes to again but the receiver through Payload,
// allocated with the Message itself when it is small (the common case:
// one allocation per message, not two). The fields are set one by one: a
// struct literal assigned to the new Message is built aside and copied
// with a write barrier for the whole.
func buildMessage(kind Kind, deadline hotpath.Instant, fields [nFields]string, body []byte) *Message {
	n := len(body)
	for _, f := range fields {
		n += len(f)
	}
	if n > maxInlineData {
		return buildLarge(kind, deadline, fields, body)
	}
	m, buf := allocMessage(n)
	m.kind, m.deadline = kind.code(), deadline
	for i, f := range fields {
		buf = append(buf, f...)
		m.ends[i] = uint32(len(buf))
	}
	m.data = append(buf, body...)
	return m
}

// buildLarge is buildMessage past the sizes that share the Message's
// allocation: the buffer is allocated on its own and not zeroed first
// (bytes.Join's), since every byte of it is copied in at once
// (docs/performance.md, round six: a small gain).
func buildLarge(kind Kind, deadline hotpath.Instant, fields [nFields]string, body []byte) *Message {
	m := new(Message)
	m.kind, m.deadline = kind.code(), deadline
	var parts [nFields + 1][]byte
	end := 0
	for i, f := range fields {
		parts[i] = unsafe.Slice(unsafe.StringData(f), len(f))
		end += len(f)
		m.ends[i] = uint32(end)
	}
	parts[nFields] = body
	m.data = bytes.Join(parts[:], nil)
	return m
}

// copyForReceiver returns m for one more receiver: the same header fields
// and a payload of its own (a copy of the whole buffer, in one allocation
// with the new Message when it is small).
func (m *Message) copyForReceiver() *Message {
	if len(m.data) > maxInlineData {
		o := new(Message)
		o.ends, o.kind, o.deadline = m.ends, m.kind, m.deadline
		o.data = append([]byte(nil), m.data...) // not zeroed first, as buildLarge
		return o
	}
	o, buf := allocMessage(len(m.data))
	o.ends, o.kind, o.deadline = m.ends, m.kind, m.deadline
	o.data = append(buf, m.data...)
	return o
}

// field is header field i, which shares data's memory: data's header
// bytes are never written after buildMessage.
func (m *Message) field(i int) string {
	start := uint32(0)
	if i > 0 {
		start = m.ends[i-1]
	}
	if start == m.ends[i] {
		return ""
	}
	return unsafe.String(&m.data[start], m.ends[i]-start)
}

// mallocHeader is what the Go allocator adds to an object with pointers
// larger than 512 bytes (runtime's mallocHeaderSize).
const mallocHeader = 8

// Messages with their data in the same allocation, by total size: each
// struct fills a Go size class on 64-bit. A message is the garbage
// collector's main cost on a busy subscriber (it runs once per so many
// bytes allocated), so the steps are close: a 128-byte payload with its
// id, channel and from takes 256 bytes, not the 416 one coarser step
// would round it to.
type (
	messageIn128 struct {
		m    Message
		data [128 - unsafe.Sizeof(Message{})]byte
	}
	messageIn192 struct {
		m    Message
		data [192 - unsafe.Sizeof(Message{})]byte
	}
	messageIn256 struct {
		m    Message
		data [256 - unsafe.Sizeof(Message{})]byte
	}
	messageIn320 struct {
		m    Message
		data [320 - unsafe.Sizeof(Message{})]byte
	}
	messageIn416 struct {
		m    Message
		data [416 - unsafe.Sizeof(Message{})]byte
	}
	messageIn512 struct {
		m    Message
		data [512 - unsafe.Sizeof(Message{})]byte
	}
	// Past 512 bytes an object with pointers carries an 8-byte header
	// of the allocator's within its size class.
	messageIn640 struct {
		m    Message
		data [640 - mallocHeader - unsafe.Sizeof(Message{})]byte
	}
)

// allocMessage returns a new Message and an empty buffer of capacity n
// (at most maxInlineData) for its strings and payload, in one allocation:
// the smallest of the sizes above that holds both (each a Go size class,
// so nothing is rounded up past it). Larger data is allocated on its own
// (buildLarge).
func allocMessage(n int) (*Message, []byte) {
	switch {
	case n <= len(messageIn128{}.data):
		x := new(messageIn128)
		return &x.m, x.data[:0:n]
	case n <= len(messageIn192{}.data):
		x := new(messageIn192)
		return &x.m, x.data[:0:n]
	case n <= len(messageIn256{}.data):
		x := new(messageIn256)
		return &x.m, x.data[:0:n]
	case n <= len(messageIn320{}.data):
		x := new(messageIn320)
		return &x.m, x.data[:0:n]
	case n <= len(messageIn416{}.data):
		x := new(messageIn416)
		return &x.m, x.data[:0:n]
	case n <= len(messageIn512{}.data):
		x := new(messageIn512)
		return &x.m, x.data[:0:n]
	default:
		x := new(messageIn640)
		return &x.m, x.data[:0:n]
	}
}

// maxInlineData is the most data a Message shares its allocation with.
const maxInlineData = len(messageIn640{}.data)

// ID is the framework-assigned message id.
func (m *Message) ID() string { return m.field(fieldID) }

// Kind is EVENT, REQUEST or REPLY.
func (m *Message) Kind() Kind { return kinds[m.kind] }

// Channel is the channel name.
func (m *Message) Channel() string { return m.field(fieldChannel) }

// From is the authenticated source, "<node>.bus"; the broker sets it.
func (m *Message) From() string { return m.field(fieldFrom) }

// To is the target as the sender wrote it; empty for a publication.
func (m *Message) To() string { return m.field(fieldTo) }

// ReplyTo is, on a reply, the id of the request it answers.
func (m *Message) ReplyTo() string { return m.field(fieldReplyTo) }

// Payload returns the payload: the receiver's own copy, made once when the
// message arrived and shared with no other receiver, so it may be kept and
// even modified without affecting anyone else. Payload does not copy it
// again: every call returns the same bytes.
func (m *Message) Payload() []byte {
	if start := m.ends[nFields-1]; int(start) < len(m.data) {
		return m.data[start:len(m.data):len(m.data)]
	}
	return nil
}

// Deadline is when the sender stops waiting (zero when unknown).
func (m *Message) Deadline() time.Time { return m.deadline.Time() }

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
