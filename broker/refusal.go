package broker

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"busbar/wire"
)

// A refusal is the broker's typed "no" to one message or command: the
// result its sender is told, and why. It is an error, so the code that
// decides returns it like any other; answer turns it into what the sender
// expects, with the return code of that kind of answer (kindRC). A fatal
// refusal also closes the connection after the answer (nsq's
// FatalClientErr); any other leaves it serving (nsq's ClientErr).
//
// Not every refusal is a failure of the sender: NO_SUBSCRIBER,
// NOT_CONNECTED or BACKPRESSURED on a send are ordinary outcomes the
// broker reports without a receipt from the destination. Only REJECTED and
// AMBIGUOUS count as refusals in Stats and the log.
type refusal struct {
	result wire.Result
	text   string
	fatal  bool
}

func (r *refusal) Error() string { return string(r.result) + ": " + r.text }

// refuse is a refusal with result and text.
func refuse(result wire.Result, text string) *refusal {
	return &refusal{result: result, text: text}
}

// rejectf is a REJECTED refusal, the answer to what permissions, limits
// or syntax do not allow.
func rejectf(format string, args ...any) *refusal {
	return &refusal{result: wire.ResultRejected, text: fmt.Sprintf(format, args...)}
}

// fatal is a refusal that closes the connection once answered.
func fatal(result wire.Result, text string) *refusal {
	return &refusal{result: result, text: text, fatal: true}
}

// counted reports whether the refusal is one Stats.Refused counts and the
// log warns about: a "no" from permissions or limits, not an outcome.
func (r *refusal) counted() bool {
	return r.result == wire.ResultRejected || r.result == wire.ResultAmbiguous
}

// kind is what a refusal answers, which decides the shape of the answer.
type kind uint8

const (
	kindStream  kind = iota // no answer: a stream is fire-and-forget; the drop is counted
	kindSend                // a bus.receipt carrying the result
	kindRequest             // a response with rc 20, result and error
	kindPublish             // a bus.published with rc 10, result and error
	kindControl             // a response to the bus.* command with rc 10, result and error
	kindFrame               // a bus.error: the frame names nothing to answer
	kindHello               // the bus.hello response; the connection closes
)

// kindRC is the return code of each kind's answer: a message the bus
// could not carry is a failure (RC_FAILURE); a publication or command it
// refused is an error (RC_ERROR). A receipt carries no rc.
var kindRC = [...]wire.RC{
	kindRequest: wire.RCFailure, kindPublish: wire.RCError, kindControl: wire.RCError,
	kindFrame: wire.RCFailure, kindHello: wire.RCFailure,
}

var kindNames = [...]string{
	kindStream: "stream", kindSend: "send", kindRequest: "request", kindPublish: "publish",
	kindControl: "control", kindFrame: "frame", kindHello: "hello",
}

// subject is the message a refusal answers. Its strings may alias the
// read buffer: answer clones what it keeps.
type subject struct {
	kind    kind
	id      string // the id the answer replies to
	command string // the channel, or the bus.* command
	topic   string // for a bus.* command: the channel, service or namespace it is about
	from    string // who the answer is about: a receipt's destination
}

// answer tells c that the message s was refused, in the form s's kind
// calls for, counts and logs it, and closes c when r is fatal. An answer
// that c's queue cannot take is dropped and counted.
func (b *Broker) answer(d dest, s subject, r *refusal) {
	c := d.ep()
	if s.kind == kindStream {
		// A stream has no answer and may come fast: a drop is counted, and
		// logged only at debug level.
		reason := DropStreamRefused
		if r == errStampedTooLarge {
			reason = DropStreamTooLarge
		}
		b.stats.drop(reason)
		b.log.Debug("stream message dropped", "node", c.node, "channel", strings.Clone(clip(s.command)), "why", strings.Clone(clip(r.text)))
		return
	}
	if r.counted() {
		if s.kind == kindControl {
			b.logRefused(c, s.command, s.topic, r.text)
		} else {
			b.logRefused(c, kindNames[s.kind], s.command, r.text)
		}
	}
	s.command, s.from = strings.Clone(s.command), strings.Clone(s.from)
	var m *wire.Message
	switch s.kind {
	case kindSend:
		m = wire.New(wire.TypeResponse, wire.CmdReceipt).
			WithHeader(wire.HeaderReplyTo, s.id).
			WithHeader(wire.HeaderResult, string(receiptResult(r.result)))
		if s.from != "" {
			m.Set(wire.HeaderFrom, s.from)
		}
	case kindRequest:
		m = wire.New(wire.TypeResponse, s.command).
			WithHeader(wire.HeaderReplyTo, s.id).
			WithHeader(wire.HeaderFrom, b.opts.Name+".bus")
	case kindPublish:
		m = wire.New(wire.TypeResponse, wire.CmdPublished).WithHeader(wire.HeaderReplyTo, s.id)
	case kindControl:
		m = wire.New(wire.TypeResponse, s.command).WithHeader(wire.HeaderReplyTo, s.id)
	case kindFrame:
		b.stats.malformed.Add(1)
		m = wire.New(wire.TypeEvent, wire.CmdError)
	case kindHello:
		m = wire.New(wire.TypeResponse, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion)
		if s.id != "" {
			m.Set(wire.HeaderReplyTo, s.id)
		}
	}
	b.traffic.refusal(s.kind, r.result)
	if s.kind != kindSend {
		m.Set(wire.HeaderRC, strconv.Itoa(int(kindRC[s.kind])))
		m.Set(wire.HeaderResult, string(r.result))
		m.Set(wire.HeaderError, r.text)
	}
	if r.fatal || s.kind == kindHello {
		c.setReason(r.result)
		c.out.Close(m)
		return
	}
	b.post(d, m)
}

// receiptResult is the receipt result that stands for r: a receipt only
// says what happened to one delivery (docs/messaging.md#results).
func receiptResult(r wire.Result) wire.Result {
	switch r {
	case wire.Accepted, wire.NoSubscriber, wire.NotConnected, wire.Backpressured, wire.Rejected, wire.TimedOut, wire.Failed:
		return r
	case wire.ResultOverload:
		return wire.Backpressured
	}
	return wire.Rejected
}

// logRefused counts and logs a refusal by permissions or limits. Peer
// strings are clipped and cloned: they may alias the read buffer.
func (b *Broker) logRefused(c *endpoint, op, channel, why string) {
	b.stats.refused.Add(1)
	b.events.add(Event{Kind: EventRefused, Node: c.node, Subject: op + " " + channel, Text: strings.Clone(clip(why))})
	b.warnConn(c, logRefused, "refused", "node", c.node, "op", strings.Clone(clip(op)), "channel", strings.Clone(clip(channel)), "why", strings.Clone(clip(why)))
}

// post queues an answer the broker owes c, counting it when c's queue
// cannot take it.
func (b *Broker) post(c dest, m *wire.Message) {
	k, n := postedKind(m), m.WireLen()
	if !c.ep().out.Enqueue(m, time.Time{}) {
		b.stats.drop(DropAnswerUndeliverable)
		return
	}
	b.traffic.answers[k].add(tally{1, int64(n)})
}

// reply answers the control request s with body (rc 0).
func (b *Broker) reply(c dest, s subject, body []byte) {
	b.post(c, wire.New(wire.TypeResponse, s.command).
		WithHeader(wire.HeaderReplyTo, s.id).
		WithHeader(wire.HeaderRC, "0").
		WithBody(body))
}

// fitAnswer encodes v as the JSON body of an answer, or refuses when the
// body would not fit answerLimit; hint says what to ask for instead.
func (b *Broker) fitAnswer(v any, what, hint string) ([]byte, *refusal) {
	body, err := wire.JSON(v)
	if err != nil {
		return nil, refuse(wire.ResultHandler, "encoding "+what+": "+err.Error())
	}
	if limit := b.answerLimit(); len(body) > limit {
		text := what + " is " + strconv.Itoa(len(body)) + " bytes, over the " + strconv.Itoa(limit) + " bytes an answer of the broker may have"
		if hint != "" {
			text += "; " + hint
		}
		return nil, refuse(wire.ResultRejected, text)
	}
	return body, nil
}

// answerLimit bounds the body of the broker's own answers (the directory,
// the registry, a state snapshot). MaxPayload bounds what nodes send; an
// answer may be larger, or a directory of a few thousand nodes could not
// be listed, up to what the asker's queue can hold with room for the
// header block (MaxQueueBytes less MaxFrameOverhead) and never past the
// frame limit. It is never below MaxPayload.
func (b *Broker) answerLimit() int {
	return max(b.opts.MaxPayload, min(b.opts.MaxQueueBytes-MaxFrameOverhead, maxPayloadCeiling))
}

// MaxLoggedString bounds any peer-supplied string the broker writes to its
// log: a longer one is cut and marked, so a peer cannot make a log line as
// long as a frame.
const MaxLoggedString = 256

// clip cuts s to MaxLoggedString bytes for the log.
func clip(s string) string {
	if len(s) <= MaxLoggedString {
		return s
	}
	return s[:MaxLoggedString] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
